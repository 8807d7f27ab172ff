"""Domain errors. The API maps each to one HTTP status; the CLI prints its message."""


class CrucibleError(Exception):
    """Base for errors a caller can act on; the message is one sentence for a user."""


class NotFound(CrucibleError):
    def __init__(self, entity: str, key: object) -> None:
        super().__init__(f"{entity} {key!r} not found")
        self.entity = entity
        self.key = key


class Conflict(CrucibleError):
    """The request is valid but clashes with the current state."""


class InvalidTransition(Conflict):
    def __init__(self, current: str, requested: str) -> None:
        super().__init__(f"cannot move a run from phase {current} to {requested}")
        self.current = current
        self.requested = requested


class Unauthenticated(CrucibleError):
    pass


class Forbidden(CrucibleError):
    pass


class InvalidInput(CrucibleError):
    """Input that passed schema validation but breaks a rule that needs the database.

    `location` is where the field came from, as in FastAPI's error paths: "query" or "body".
    """

    def __init__(self, field: str, value: object, message: str, *, location: str) -> None:
        super().__init__(f"{field}: {message} (got {value!r})")
        self.field = field
        self.value = value
        self.message = message
        self.location = location


class ServiceUnavailable(CrucibleError):
    """A dependency (the database) is down; the client should retry later."""
