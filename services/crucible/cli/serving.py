"""`crucible serve CHECKPOINT`: a registered checkpoint behind an OpenAI-compatible endpoint.

The model is rebuilt from the checkpoint's meta and its weights loaded, digest-checked,
through the control plane (CRUCIBLE_API_URL and the CLI's token), then served by the engine
on this machine until Ctrl-C.
"""

import os
import secrets
from pathlib import Path
from typing import Annotated

import typer

from crucible.cli.common import ProjectOpt, client
from crucible.cli.output import console
from crucible.config.engine import ServeLimits
from crucible.domain.errors import CrucibleError
from crucible.settings import DEFAULT_PROJECT, Settings, load_settings

API_KEY_ENV = "CRUCIBLE_SERVE_API_KEY"


def serve_checkpoint(
    checkpoint: Annotated[int, typer.Argument(help="Id of a registered checkpoint.")],
    project: ProjectOpt = DEFAULT_PROJECT,
    host: Annotated[str, typer.Option(help="Interface to bind.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535)] = 8000,
    device: Annotated[
        str, typer.Option(help="cpu, cuda, cuda:N, or auto (the first GPU when there is one).")
    ] = "auto",
    name: Annotated[
        str | None, typer.Option(help="Model name clients ask for; checkpoint-ID by default.")
    ] = None,
    max_running: Annotated[
        int, typer.Option(min=1, help="Sequences generating at once, at most.")
    ] = 256,
    block_size: Annotated[int, typer.Option(min=1, help="Positions per KV block.")] = 16,
    max_body_bytes: Annotated[
        int, typer.Option(min=1, help="Largest request body; a larger one gets 413 unread.")
    ] = ServeLimits.max_body_bytes,
    max_prompts: Annotated[
        int, typer.Option(min=1, help="Prompts in one completions request, at most.")
    ] = ServeLimits.max_prompts,
    max_choices: Annotated[
        int, typer.Option(min=1, help="Completions (prompts x n) one request starts, at most.")
    ] = ServeLimits.max_choices,
    crucible_tokens: Annotated[
        bool,
        typer.Option(
            "--crucible-tokens",
            help="Accept the project's Crucible API tokens (checked with the control plane) "
            "instead of a key of this server's own; CRUCIBLE_SERVE_API_KEY, when set, too.",
        ),
    ] = False,
) -> None:
    """Serve a checkpoint's model: /v1/completions, /v1/chat/completions, /v1/models,
    /health and /metrics. Clients send `Authorization: Bearer KEY`, the key taken from
    CRUCIBLE_SERVE_API_KEY, else made and saved under CRUCIBLE_HOME; with --crucible-tokens,
    a Crucible API token that may read the project."""
    import torch
    import uvicorn

    from crucible.config.engine import EngineConfig
    from crucible.config.parse import ConfigError
    from crucible.engine.async_engine import AsyncEngine
    from crucible.engine.engine import Engine
    from crucible.jobs.checkpoints import load_model
    from crucible.sdk.checkpoint import CheckpointError
    from crucible.sdk.reader import CheckpointReader
    from crucible.serving.openai.app import create_engine_app
    from crucible.serving.openai.control_plane_tokens import ControlPlaneTokens

    settings = load_settings()
    if crucible_tokens:
        # A served model on Kubernetes: its callers hold tokens, not a key of its own.
        given = os.environ.get(API_KEY_ENV)
        api_keys = [given] if given else []
        token_check = ControlPlaneTokens(settings.api_url, project)
    else:
        api_keys, token_check = [_api_key(settings)], None
    target = torch.device(
        ("cuda" if torch.cuda.is_available() else "cpu") if device == "auto" else device
    )
    reader = CheckpointReader(client(), project=project, home=settings.home)
    try:
        model, tokenizer, record = load_model(reader, checkpoint, device=target)
    except (ConfigError, CheckpointError) as exc:  # not a model, or unreadable weights
        raise CrucibleError(f"cannot serve checkpoint {checkpoint}: {exc}") from None
    if target.type == "cuda":
        # bf16 as the rollouts sample (their logprobs are what the trainer recomputes).
        model = model.to(torch.bfloat16)
    engine = AsyncEngine(
        Engine(model, tokenizer, EngineConfig(block_size=block_size, max_running=max_running))
    )
    model_name = name or f"checkpoint-{record.id}"
    app = create_engine_app(
        engine,
        model_name=model_name,
        tokenizer=tokenizer,
        api_keys=api_keys,
        token_check=token_check,
        model_root=f"checkpoint-{record.id}",
        limits=ServeLimits(
            max_body_bytes=max_body_bytes, max_prompts=max_prompts, max_choices=max_choices
        ),
    )
    console.print(
        f"serving {model_name} (run {record.run_id}, step {record.step}) on "
        f"http://{host}:{port}/v1",
        highlight=False,
    )
    uvicorn.run(app, host=host, port=port, log_level="warning")


def _api_key(settings: Settings) -> str:
    """The key clients must send: CRUCIBLE_SERVE_API_KEY, else the one saved under
    CRUCIBLE_HOME (made on first use). Printed only to a terminal, never to a log."""
    given = os.environ.get(API_KEY_ENV)
    if given:
        return given
    path: Path = settings.home / "serve-api-key"
    if path.exists():
        key = path.read_text().strip()
    else:
        key = f"crucible-serve-{secrets.token_urlsafe(24)}"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch(mode=0o600)
        path.write_text(key + "\n")
    where = f"API key in {path} (or set {API_KEY_ENV})"
    if console.file.isatty():
        console.print(f"API key: {key}", highlight=False)
    console.print(where, highlight=False)
    return key
