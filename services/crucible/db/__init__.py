"""Persistence: SQLAlchemy 2.0 tables, engine and sessions. Only the core use-cases write here."""
