"""The typed HTTP client (SDK) for the control plane."""

from crucible.client.http import ApiError, CrucibleClient

__all__ = ["ApiError", "CrucibleClient"]
