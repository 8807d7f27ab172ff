"""Metric series: batches in (`ingest`), series out (`history`), over the chunked store
(`store`)."""

from crucible.core.metrics.history import history, list_keys
from crucible.core.metrics.ingest import idempotency_scope, ingest

__all__ = ["history", "idempotency_scope", "ingest", "list_keys"]
