"""`crucible deployments`: the served checkpoints the backends report, which checkpoint each
serves, and promoting another to one."""

from typing import Annotated

import typer

from crucible.cli.common import client, friendly_errors
from crucible.cli.output import table
from crucible.schemas.deployments import CheckpointBrief, DeploymentPublic, PromotionAccepted

deployments_app = typer.Typer(no_args_is_help=True, help="Served checkpoints.")


@deployments_app.command("list")
@friendly_errors
def deployments_list(
    project: Annotated[
        str | None,
        typer.Option(
            "--project", "-p", help="Only this project's; default: every project the token sees."
        ),
    ] = None,
    limit: Annotated[int, typer.Option(min=1, max=1000)] = 100,
) -> None:
    """List served checkpoints, newest first: what each serves, what it wants to serve (its
    reference resolved now), and how many pods are ready."""
    with client() as api:
        page = api.list_deployments(project, limit=limit)
    table(
        "deployments" if project is None else f"deployments in {project}",
        ["ID", "NAME", "PROJECT", "SERVING", "WANTED", "READY", "PHASE", "URL"],
        [
            (
                d.id,
                d.name,
                d.project,
                describe(d.serving),
                d.checkpoint_id if d.checkpoint_id is not None else d.resolve_error,
                f"{d.ready_replicas}/{d.replicas}",
                d.phase,
                d.url,
            )
            for d in page.items
        ],
    )


@deployments_app.command("show")
@friendly_errors
def deployments_show(
    deployment_id: Annotated[int, typer.Argument(help="The deployment's id.")],
) -> None:
    """Print a served checkpoint as JSON."""
    with client() as api:
        deployment: DeploymentPublic = api.get_deployment(deployment_id)
    typer.echo(deployment.model_dump_json(indent=2, by_alias=True))


@deployments_app.command("promote")
@friendly_errors
def deployments_promote(
    deployment_id: Annotated[int, typer.Argument(help="The deployment's id.")],
    checkpoint_id: Annotated[
        int, typer.Argument(help="A live checkpoint of the deployment's project.")
    ],
) -> None:
    """Serve another checkpoint from a deployment (editor tokens). The endpoint's pods roll to
    it one at a time; `crucible deployments list` shows it WANTED, then SERVING."""
    with client() as api:
        accepted: PromotionAccepted = api.promote_checkpoint(deployment_id, checkpoint_id)
    typer.echo(
        f"promotion accepted: ServedModel {accepted.namespace}/{accepted.name} will serve "
        f"checkpoint {accepted.checkpoint_id}"
    )


def describe(checkpoint: CheckpointBrief | None) -> str:
    """`12 (sft-1/step 200)`, or empty before any pod serves."""
    if checkpoint is None:
        return ""
    return f"{checkpoint.id} ({checkpoint.run_name}/step {checkpoint.step})"
