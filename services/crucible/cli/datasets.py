"""`crucible datasets`: register files as dataset versions, list, show and download them."""

import typer

datasets_app = typer.Typer(no_args_is_help=True, help="Datasets.")
