"""Rich rendering shared by the CLI commands."""

from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

from rich.console import Console
from rich.table import Table

console = Console()
errors = Console(stderr=True, soft_wrap=True)  # an error stays one line, whatever the width


def table(title: str, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    out = Table(title=title, title_justify="left")
    for column in columns:
        out.add_column(column)
    for row in rows:
        out.add_row(*("" if cell is None else str(cell) for cell in row))
    console.print(out)


def age(when: datetime | None) -> str:
    if when is None:
        return ""
    seconds = int((datetime.now(UTC) - when).total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"
