"""Development tools that read the repository (the package's source, its tests); not installed with the package."""
