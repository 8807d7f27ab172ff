"""Pydantic models of the REST API (requests and responses), shared by the server and the SDK.

Kept apart from the SQLAlchemy tables: a column can change without changing the API.
"""
