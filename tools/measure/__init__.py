"""Measurement: python -m tools.measure.sizes | codec | client | broker."""
