"""The REST API: thin routes over the core use-cases."""
