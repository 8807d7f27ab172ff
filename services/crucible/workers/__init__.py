"""The workers: follow-ups of the control plane's state changes (recovery, eval triggers),
delivered through the transactional outbox, and the periodic sweeps.

`handlers` does the work (one database transaction per message, exactly once), `relay`
moves outbox rows to Celery, `celery_app` is the `crucible worker` process, and `inprocess`
runs the same handlers and sweeps as a thread of `crucible up`.
"""
