"""Use-cases: the only code that writes the database. Functions take keyword-only arguments
and a session, return API models, and raise domain errors."""
