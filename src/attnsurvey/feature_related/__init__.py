"""§3.1 Feature-related attention: multiplicity, levels and representations of the features."""
