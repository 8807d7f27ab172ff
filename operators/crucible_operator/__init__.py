"""The Kubernetes side of Crucible: the operator (`crucible operator`) and the custom
resource definitions it serves."""
