"""The local backend: runs the same run specs as the operator, as processes on this machine."""
