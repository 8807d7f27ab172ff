"""The "essence" kopf compares to tell a spec change from any other event: always empty here.

kopf builds it for every event of every object it watches (a deep copy of the body without
metadata and status) and stores it on each resource as an annotation once handled, so that
its create, update and resume handlers fire on real changes only. This operator registers
none of those: each reconcile pass reads the spec it acts on, and a new generation or a
deletion wakes the loop through an event handler (handlers.py). So the essence is empty:
every event is then a no-op to kopf's change detection (deletion is still seen, from the
deletion timestamp and the finalizer), at no copy per pod event and no annotation patch per
resource.
"""

from typing import Any

import kopf


class EmptyEssence(kopf.DiffBaseStorage):
    def build(self, *, body: kopf.Body, extra_fields: Any = None) -> kopf.BodyEssence:
        return {}

    def fetch(self, *, body: kopf.Body) -> kopf.BodyEssence | None:
        # Never None: kopf takes a missing essence for an object it has not handled yet.
        return {}

    def store(self, *, body: kopf.Body, patch: kopf.Patch, essence: kopf.BodyEssence) -> None:
        return None
