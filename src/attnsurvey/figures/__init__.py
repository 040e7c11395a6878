"""Drawings of the survey's figures (Figs. 1-11) and the architecture diagrams, generated from code."""
