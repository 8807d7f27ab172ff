"""The `crucible` command line."""
