"""Which of the training shapes a record has, from its fields alone: a module without torch,
so that `crucible datasets register` can say it without loading the trainer's code."""

from crucible.training.records import DataError, Record

SHAPES = ("text", "prompt_completion", "chat")
AUTO = "auto"
"""`data.shape` default: the shape of the first record's fields."""


def detect_shape(record: Record, where: str) -> str:
    """The shape a record's fields say it has: messages, then prompt/completion, then text."""
    if "messages" in record:
        return "chat"
    if "prompt" in record and "completion" in record:
        return "prompt_completion"
    if "text" in record:
        return "text"
    raise DataError(
        f"{where} has none of the fields of a training record (text; prompt and completion; "
        f"messages); its fields: {', '.join(sorted(record)) or 'none'}"
    )
