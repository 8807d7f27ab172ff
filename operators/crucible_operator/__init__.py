"""The Kubernetes side of Crucible: custom resource definitions (and, later, the operator)."""
