"""Fronts over the serving engine."""
