"""The limits MLflow's server enforces (mlflow/utils/validation.py of the pinned client),
checked before anything is written, so a rejected request leaves nothing behind."""

import math
import posixpath
import unicodedata
from datetime import UTC, datetime

from crucible.domain.resources import TAG_PREFIX
from crucible.mlflow_compat.errors import MlflowError, invalid
from crucible.schemas.metrics import EARLIEST_TIME, LATEST_TIME

MAX_PARAMS_TAGS_PER_BATCH = 100
MAX_METRICS_PER_BATCH = 1000
MAX_ENTITIES_PER_BATCH = 1000
MAX_PARAM_VAL_LENGTH = 6000
MAX_TAG_VAL_LENGTH = 8000
MAX_ENTITY_KEY_LENGTH = 250
MAX_EXPERIMENT_TAG_KEY_LENGTH = 250
MAX_EXPERIMENT_TAG_VAL_LENGTH = 20000
# Crucible's experiments.name column; MLflow allows 500.
MAX_EXPERIMENT_NAME_LENGTH = 63
MAX_STEP = 2**63 - 1
# MLflow's runs.name and runs.user_id columns.
MAX_RUN_NAME_LENGTH = 250
MAX_USER_ID_LENGTH = 256
# A run's start and end: what a datetime holds, from the epoch on.
LATEST_TIME_MS = int(datetime(9999, 12, 31, tzinfo=UTC).timestamp() * 1000)
# The bidirectional overrides and isolates, which make text read other than it is stored.
_BIDI_CONTROLS = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def check_batch_sizes(metrics: int, params: int, tags: int) -> None:
    for entity, count, limit in (
        ("metrics", metrics, MAX_METRICS_PER_BATCH),
        ("params", params, MAX_PARAMS_TAGS_PER_BATCH),
        ("tags", tags, MAX_PARAMS_TAGS_PER_BATCH),
    ):
        if count > limit:
            raise invalid(
                f"A batch logging request can contain at most {limit} {entity}. "
                f"Got {count} {entity}. Please split up {entity} across multiple requests and try "
                "again."
            )
    total = metrics + params + tags
    if total > MAX_ENTITIES_PER_BATCH:
        raise invalid(
            f"A batch logging request can contain at most {MAX_ENTITIES_PER_BATCH} "
            f"metrics, params and tags in total. Got {total}."
        )


def check_key(key: str, what: str) -> None:
    if not key:
        raise invalid(f"Invalid {what} name: ''. Names must be non-empty.")
    if len(key) > MAX_ENTITY_KEY_LENGTH:
        raise invalid(
            f"{what.capitalize()} name '{key[:40]}...' had length {len(key)}, which exceeded "
            f"length limit of {MAX_ENTITY_KEY_LENGTH}"
        )
    normal = posixpath.normpath(key)
    if normal != key or key.startswith("/") or "," in key or any(ord(c) < 0x20 for c in key):
        raise invalid(
            f"Invalid {what} name: '{key}'. Names may only contain alphanumerics, underscores, "
            "dashes, periods, spaces, colons and slashes, and must not resolve to another name "
            f"(this one would resolve to {normal!r}); commas are not taken."
        )


def check_param(key: str, value: str) -> None:
    check_key(key, "parameter")
    check_length("Param value", value, MAX_PARAM_VAL_LENGTH)


def check_tag(key: str, value: str) -> None:
    check_key(key, "tag")
    check_not_reserved(key)
    check_length("Tag value", value, MAX_TAG_VAL_LENGTH)


def check_not_reserved(key: str) -> None:
    """Tags under crucible.dev/ are the platform's (the checkpoint an eval run scores, the run
    a reproduction repeats): retention and the sweeps read them, so no client writes them."""
    if key.startswith(TAG_PREFIX):
        raise invalid(
            f"Invalid tag name: '{key}'. Tags under '{TAG_PREFIX}' are reserved for Crucible "
            "itself; pick another prefix."
        )


def check_length(what: str, value: str, most: int) -> None:
    if len(value) > most:
        raise invalid(
            f"{what} '{value[:40]}...' had length {len(value)}, which exceeded length limit "
            f"of {most}"
        )


def check_metric(key: str, value: float, timestamp_ms: int, step: int) -> None:
    check_key(key, "metric")
    if not math.isfinite(value):
        raise invalid(
            f"Got invalid value {value} for metric '{key}': Crucible stores finite numbers only "
            "(NaN and infinities are refused; docs/mlflow.md)"
        )
    if not 0 <= step <= MAX_STEP:
        raise invalid(f"Got invalid step {step} for metric '{key}': steps are 0 or more")
    seconds = timestamp_ms / 1000
    if not EARLIEST_TIME <= seconds <= LATEST_TIME:
        raise invalid(
            f"Got invalid timestamp {timestamp_ms} for metric '{key}': milliseconds since the "
            "epoch between the years 2000 and 2100"
        )


def check_experiment_name(name: str) -> None:
    """MLflow takes any string; Databricks names experiments by workspace path
    (`/Users/me/exp`), so `/` stays. Refused: control characters (a name is printed to
    terminals and logs, where an escape would act) and `.` or `..` segments, which name no
    experiment but would walk up wherever a name becomes a path."""
    if not name:
        raise invalid(f"Invalid experiment name: '{name}'")
    check_length("Experiment name", name, MAX_EXPERIMENT_NAME_LENGTH)
    check_printable("experiment name", name)
    if any(part in (".", "..") for part in name.replace("\\", "/").split("/")):
        raise invalid(
            f"Invalid experiment name: {name!r}: '.' and '..' are not names; drop those segments."
        )


def check_run_name(name: str) -> None:
    check_length("Run name", name, MAX_RUN_NAME_LENGTH)
    check_printable("run name", name)


def check_printable(what: str, text: str) -> None:
    """No controls (C0, DEL and C1: a terminal's escapes among them), line or paragraph
    separators, or bidirectional overrides in a name."""
    for character in text:
        if unicodedata.category(character) in ("Cc", "Zl", "Zp") or character in _BIDI_CONTROLS:
            raise invalid(
                f"Invalid {what} {text[:100]!r}: it holds the control character "
                f"{character!r}; names are printable text."
            )


def check_experiment_tag(key: str, value: str) -> None:
    check_key(key, "tag")
    check_not_reserved(key)
    check_length("Tag value", value, MAX_EXPERIMENT_TAG_VAL_LENGTH)


def moment_of_millis(field: str, millis: int) -> datetime:
    """A run's start or end time, MLflow's milliseconds since the epoch, as a datetime."""
    if not 0 <= millis <= LATEST_TIME_MS:
        raise invalid(
            f"Invalid value {millis} for parameter '{field}': milliseconds since the epoch, "
            f"from 0 to {LATEST_TIME_MS} (the year 9999)."
        )
    return datetime.fromtimestamp(millis / 1000, UTC)


def invalid_filter(source: str, why: str) -> MlflowError:
    return invalid(f"Invalid search filter {source!r}: {why}.")
