"""Task models and training loops used by the chapters' experiments."""
