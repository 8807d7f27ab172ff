"""The old home of the ML half, which moved into floors (docs/architecture.md): what is left
here are the published paths that still work, each warning once where it now lives."""
