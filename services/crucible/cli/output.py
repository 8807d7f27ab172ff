"""Rich rendering shared by the CLI commands."""

import unicodedata
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

console = Console()
errors = Console(stderr=True, soft_wrap=True)  # an error stays one line, whatever the width


def table(title: str, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    out = Table(title=title, title_justify="left")
    for column in columns:
        out.add_column(column)
    for row in rows:
        out.add_row(*(Text(printable("" if cell is None else str(cell))) for cell in row))
    console.print(out)


def printable(text: str) -> str:
    """`text` with its control characters written as escapes (`\\x1b`): a name or a
    description comes from whoever made it, and a raw escape would act on the terminal.
    As Text, not markup, so `[...]` in it shows as written too."""
    return "".join(c.encode("unicode_escape").decode() if _is_control(c) else c for c in text)


def _is_control(character: str) -> bool:
    return unicodedata.category(character) in ("Cc", "Cf", "Zl", "Zp") and character != "\u200d"


def age(when: datetime | None) -> str:
    if when is None:
        return ""
    seconds = int((datetime.now(UTC) - when).total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"
