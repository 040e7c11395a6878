"""Synthetic data for the chapters: generators of tensors with a known right answer, and no models."""
