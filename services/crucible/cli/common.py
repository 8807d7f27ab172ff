"""What every command group shares: the error handling, the API client, the project option."""

import functools
from collections.abc import Callable
from typing import Annotated, ParamSpec, TypeVar

import typer
import yaml
from rich.markup import escape

from crucible.cli.output import errors
from crucible.client import ApiError, CrucibleClient
from crucible.domain.errors import CrucibleError
from crucible.settings import load_settings

P = ParamSpec("P")
R = TypeVar("R")
ProjectOpt = Annotated[
    str, typer.Option("--project", "-p", envvar="CRUCIBLE_PROJECT", help="Project name.")
]


def friendly_errors(fn: Callable[P, R]) -> Callable[P, R]:
    """Turn the errors a user can cause into one line on stderr and exit code 1."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        except (ApiError, CrucibleError, OSError, yaml.YAMLError) as exc:
            errors.print(f"[red]error:[/red] {escape(str(exc))}", highlight=False)
        raise typer.Exit(1)

    return wrapper


def client() -> CrucibleClient:
    return CrucibleClient.from_settings(load_settings())
