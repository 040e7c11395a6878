"""§3.2 General attention mechanisms: scoring, alignment, dimensionality."""
