"""Self-check functions for the chapters' exercises."""
