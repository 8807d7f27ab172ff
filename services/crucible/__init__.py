"""Crucible: model-improvement experiments on Kubernetes with full lineage."""

__version__ = "0.1.0"
