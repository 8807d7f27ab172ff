"""Entry point: `crucible <command>`. Errors are one sentence on stderr and a non-zero exit."""

from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
import yaml
from pydantic import ValidationError
from rich.markup import escape

from crucible import provenance, reproduction
from crucible.cli.artifacts import artifacts_app
from crucible.cli.common import ProjectOpt, client, friendly_errors
from crucible.cli.datasets import datasets_app
from crucible.cli.deployments import deployments_app
from crucible.cli.logs import follow_log
from crucible.cli.output import age, console, errors, table
from crucible.cli.profiles import runs_profile, runs_profiles
from crucible.cli.serving import serve_checkpoint
from crucible.cli.sweeps import sweeps_app
from crucible.cli.tokenizers import tokenizers_app
from crucible.client import ApiError, CrucibleClient
from crucible.domain import resources
from crucible.domain.artifact_refs import ARTIFACT_SCHEME
from crucible.domain.enums import Backend, Phase, Role, RunKind
from crucible.domain.errors import CrucibleError
from crucible.domain.specs import WorkloadSpec
from crucible.schemas.lineage import ArtifactPublic
from crucible.schemas.provenance import CodePackage, CodeSource
from crucible.schemas.runs import AttemptPublic, RunPublic, RunSubmit
from crucible.schemas.tenancy import TokenCreate
from crucible.settings import DEFAULT_PROJECT, load_settings

app = typer.Typer(no_args_is_help=True, help="Crucible: model-improvement experiments.")
db_app = typer.Typer(no_args_is_help=True, help="Database schema.")
token_app = typer.Typer(no_args_is_help=True, help="API tokens.")
projects_app = typer.Typer(no_args_is_help=True, help="Projects.")
experiments_app = typer.Typer(no_args_is_help=True, help="Experiments.")
runs_app = typer.Typer(no_args_is_help=True, help="Runs.")
checkpoints_app = typer.Typer(no_args_is_help=True, help="Checkpoints.")
app.add_typer(db_app, name="db")
app.add_typer(token_app, name="token")
app.add_typer(projects_app, name="projects")
app.add_typer(experiments_app, name="experiments")
app.add_typer(runs_app, name="runs")
app.add_typer(checkpoints_app, name="checkpoints")
app.add_typer(datasets_app, name="datasets")
app.add_typer(tokenizers_app, name="tokenizers")
app.add_typer(artifacts_app, name="artifacts")
app.add_typer(deployments_app, name="deployments")
app.add_typer(sweeps_app, name="sweeps")
app.command("serve")(friendly_errors(serve_checkpoint))
runs_app.command("profiles")(friendly_errors(runs_profiles))
runs_app.command("profile")(friendly_errors(runs_profile))


@app.command()
@friendly_errors
def server(
    host: Annotated[str, typer.Option(help="Interface to bind.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535)] = 8080,
    workers: Annotated[int, typer.Option(min=1, help="API processes (Postgres only).")] = 1,
    worker_healthcheck_timeout: Annotated[
        int,
        typer.Option(
            min=1,
            help="With --workers: seconds a process may take to answer the supervisor's "
            "health check before it is restarted (uvicorn's default, 5, kills busy processes "
            "on a loaded machine and their requests with them).",
        ),
    ] = 30,
) -> None:
    """Run the control-plane API (embedded SQLite unless CRUCIBLE_DATABASE_URL is set)."""
    from crucible.serve import serve_api

    serve_api(
        load_settings(),
        host=host,
        port=port,
        workers=workers,
        worker_healthcheck_timeout=worker_healthcheck_timeout,
    )


class DemoSize(StrEnum):
    none = "none"
    full = "full"
    quick = "quick"


@app.command()
@friendly_errors
def up(
    host: Annotated[str, typer.Option(help="Interface to bind.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535)] = 8080,
    demo: Annotated[
        DemoSize, typer.Option(help="Also run the demo loop once serving (full or quick).")
    ] = DemoSize.none,
) -> None:
    """Run everything on this machine: the API (SQLite), the executor that runs local runs
    as processes (GPUs by CUDA_VISIBLE_DEVICES), the workers (recovery, eval triggers) and
    the dashboard."""
    from crucible.core.signin import issue_code
    from crucible.serve import serve_up

    settings = load_settings()
    if settings.is_sqlite:
        shown = "127.0.0.1" if host in ("0.0.0.0", "::") else host  # noqa: S104
        # The code is a credential: printed only to a terminal, never into a log file.
        if console.file.isatty():
            link = f"http://{shown}:{port}/#/signin?code={issue_code(settings.home)}"
            console.print(
                f"Dashboard (the link signs you in once): {link}", highlight=False, soft_wrap=True
            )
        else:
            console.print(
                f"Dashboard: http://{shown}:{port}/ (sign in with the token in "
                f"{settings.local_token_file})",
                highlight=False,
                soft_wrap=True,
            )
    on_ready = None
    if demo is not DemoSize.none:

        def on_ready(api_url: str) -> None:
            try:
                _run_demo(
                    CrucibleClient.from_settings(settings.model_copy(update={"api_url": api_url})),
                    demo,
                    DEFAULT_PROJECT,
                    "demo" if demo is DemoSize.full else "demo-quick",
                )
            except (ApiError, CrucibleError) as exc:  # the server keeps serving regardless
                errors.print(f"[red]demo:[/red] {escape(str(exc))}", highlight=False)
            else:
                console.print("demo done; Crucible keeps serving (Ctrl-C to stop)")

    serve_up(settings, host=host, port=port, on_ready=on_ready)


@app.command()
@friendly_errors
def worker(
    concurrency: Annotated[int, typer.Option(min=1, help="Tasks handled at once.")] = 4,
    beat: Annotated[
        bool, typer.Option(help="Also schedule the periodic tasks (run one beat per cluster).")
    ] = True,
    metrics_port: Annotated[
        int | None, typer.Option(help="Serve Prometheus metrics on this port.")
    ] = None,
) -> None:
    """Run a Celery worker (broker: CRUCIBLE_BROKER_URL; database: CRUCIBLE_DATABASE_URL):
    preemption recovery, eval triggers and the periodic sweeps."""
    from crucible.workers.celery_app import run_worker

    run_worker(load_settings(), concurrency=concurrency, beat=beat, metrics_port=metrics_port)


@app.command()
@friendly_errors
def operator(
    namespace: Annotated[
        list[str] | None,
        typer.Option(help="Watch only this namespace (repeatable); default: every namespace."),
    ] = None,
    default_image: Annotated[
        str, typer.Option(help="Image for specs that name none (the reference workloads).")
    ] = "ghcr.io/crucible-dev/crucible:0.1.0",
    workload_api_url: Annotated[
        str | None,
        typer.Option(help="Control-plane URL as pods reach it; default: CRUCIBLE_API_URL."),
    ] = None,
    token_secret: Annotated[
        str, typer.Option(help="Secret (per namespace, key `token`) served models' pods read.")
    ] = "crucible-workload-token",  # noqa: S107 - a Secret name, not a secret
    storage_claim: Annotated[
        str | None,
        typer.Option(
            help="ReadWriteMany PersistentVolumeClaim (in each run's namespace) mounted in "
            "every workload pod: checkpoints and published files go there."
        ),
    ] = None,
    storage_path: Annotated[
        str,
        typer.Option(help="Where pods mount --storage-claim (the workers mount it there too)."),
    ] = "/crucible-data",
    storage_uri: Annotated[
        str | None,
        typer.Option(
            help="Object storage (s3://bucket/prefix) for checkpoints and published files, "
            "instead of --storage-claim."
        ),
    ] = None,
    storage_secret: Annotated[
        str | None,
        typer.Option(
            help="Secret (per namespace) whose keys become workload pods' environment: the "
            "--storage-uri credentials (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, "
            "AWS_ENDPOINT_URL)."
        ),
    ] = None,
    workload_node_selector: Annotated[
        list[str] | None,
        typer.Option(help="KEY=VALUE every workload pod selects (repeatable), e.g. a GPU pool."),
    ] = None,
    workload_toleration: Annotated[
        list[str] | None,
        typer.Option(help="Taint key every workload pod tolerates, any value (repeatable)."),
    ] = None,
    grace_seconds: Annotated[
        int, typer.Option(min=0, help="Pods' termination grace: time to checkpoint.")
    ] = 300,
    workload_seccomp_profile: Annotated[
        str | None,
        typer.Option(
            help="Localhost seccomp profile of workload pods (a path below the kubelet's "
            "seccomp directory), e.g. the agents' tool sandbox's; default: the runtime's."
        ),
    ] = None,
    metrics_port: Annotated[
        int | None, typer.Option(help="Serve Prometheus metrics on this port.")
    ] = None,
    health_port: Annotated[
        int | None, typer.Option(help="Serve a liveness probe at :PORT/healthz.")
    ] = None,
    peering: Annotated[
        str | None,
        typer.Option(help="kopf peering name, so one instance of several is active."),
    ] = None,
    verbose: Annotated[bool, typer.Option(help="Log every handler and HTTP request.")] = False,
) -> None:
    """Run the Kubernetes operator: TrainingRun, RolloutJob and EvalJob resources become
    pods (cluster: KUBECONFIG or in-cluster; control plane: CRUCIBLE_API_URL and
    CRUCIBLE_TOKEN)."""
    from crucible_operator.main import OperatorConfig, run_operator
    from crucible_operator.pods import PodOptions

    if not storage_path.startswith("/"):
        raise typer.BadParameter(
            f"must be an absolute path, got {storage_path!r}", param_hint="--storage-path"
        )
    if storage_claim and storage_uri:
        raise typer.BadParameter(
            f"give --storage-claim ({storage_claim!r}) or --storage-uri ({storage_uri!r}), "
            "not both",
            param_hint="--storage-uri",
        )
    if storage_uri is not None and not storage_uri.startswith("s3://"):
        raise typer.BadParameter(
            f"must be an s3://bucket/prefix URI (a volume goes in --storage-claim), got "
            f"{storage_uri!r}",
            param_hint="--storage-uri",
        )
    if storage_secret and not storage_uri:
        raise typer.BadParameter(
            f"{storage_secret!r} is only used with --storage-uri", param_hint="--storage-secret"
        )
    selector: dict[str, str] = {}
    for item in workload_node_selector or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise typer.BadParameter(
                f"expected KEY=VALUE, got {item!r}", param_hint="--workload-node-selector"
            )
        selector[key] = value
    settings = load_settings()
    options = PodOptions(
        api_url=workload_api_url or settings.api_url,
        token_secret=token_secret,
        default_image=default_image,
        storage_claim=storage_claim,
        storage_path=storage_path,
        storage_uri=storage_uri,
        storage_secret=storage_secret,
        node_selector=selector,
        tolerated_taints=tuple(workload_toleration or ()),
        grace_seconds=grace_seconds,
        workload_seccomp_profile=workload_seccomp_profile,
    )
    config = OperatorConfig(
        namespaces=tuple(namespace or ()),
        pod_options=options,
        metrics_port=metrics_port,
        health_port=health_port,
        peering=peering,
    )
    run_operator(settings, config, verbose=verbose)


@app.command()
@friendly_errors
def demo(
    quick: Annotated[bool, typer.Option(help="The CI-sized loop (about 3 minutes).")] = False,
    project: ProjectOpt = DEFAULT_PROJECT,
    experiment: Annotated[
        str | None, typer.Option(help="Experiment (and run-name prefix); default demo[-quick].")
    ] = None,
    print_yaml: Annotated[
        bool, typer.Option("--print", help="Print the loop's YAML instead of running it.")
    ] = False,
) -> None:
    """Run the post-training loop on a running `crucible up`: teacher data -> SFT (evals on
    every checkpoint) -> rollouts with rewards -> RL -> evals; then accuracy and lineage."""
    size = DemoSize.quick if quick else DemoSize.full
    name = experiment or ("demo-quick" if quick else "demo")
    if print_yaml:
        from crucible.demo.loop import FULL, QUICK, loop_manifests

        manifests = loop_manifests(name, QUICK if quick else FULL)
        typer.echo(yaml.safe_dump_all(manifests, sort_keys=False), nl=False)
        return
    with client() as api:
        _run_demo(api, size, project, name)


def _run_demo(api: CrucibleClient, size: DemoSize, project: str, experiment: str) -> None:
    from crucible.demo.loop import FULL, QUICK
    from crucible.demo.watch import run_demo

    outcome = run_demo(
        api,
        project=project,
        experiment=experiment,
        size=QUICK if size is DemoSize.quick else FULL,
        console=console,
    )
    if not outcome.succeeded:
        raise CrucibleError("the demo loop did not succeed; see the runs above")


@checkpoints_app.command("export")
@friendly_errors
def checkpoints_export(
    checkpoint_id: Annotated[int, typer.Argument(help="The checkpoint to export.")],
    directory: Annotated[Path, typer.Argument(help="New (or empty) directory to write.")],
    project: ProjectOpt = DEFAULT_PROJECT,
    name: Annotated[
        str | None, typer.Option(help="Artifact name; default <run>-step<step>-hf.")
    ] = None,
    register: Annotated[
        bool, typer.Option(help="Register the directory as a model artifact in lineage.")
    ] = True,
) -> None:
    """Write a checkpoint as a Hugging Face model directory (config.json, safetensors,
    tokenizer), loadable by transformers and as `model: {hf: {path: ...}}`."""
    from crucible.config.parse import ConfigError
    from crucible.jobs.exports import export_checkpoint
    from crucible.sdk.artifacts import ArtifactCorrupt
    from crucible.sdk.checkpoint import CheckpointError

    with client() as api:
        try:
            exported = export_checkpoint(
                api, checkpoint_id, directory, project=project, name=name, register=register
            )
        except (ConfigError, CheckpointError, ArtifactCorrupt) as exc:
            raise CrucibleError(str(exc)) from None
    record = exported.checkpoint
    console.print(
        f"exported checkpoint {record.id} (run {record.run_id}, step {record.step}) to "
        f"{exported.directory}"
    )
    if exported.artifact is not None:
        artifact = exported.artifact
        console.print(f"registered artifact {artifact.id} ({artifact.name}, {artifact.digest})")


@db_app.command("upgrade")
@friendly_errors
def db_upgrade(revision: Annotated[str, typer.Argument()] = "head") -> None:
    """Migrate the database of CRUCIBLE_DATABASE_URL to the given revision (default head)."""
    from crucible.db import schema
    from crucible.db.engine import build_engine

    engine = build_engine(load_settings())
    schema.upgrade(engine, revision)
    console.print(f"database at revision {schema.current_revision(engine)}")


@token_app.command("create")
@friendly_errors
def token_create(
    project: Annotated[str | None, typer.Option(help="Project; omit for a global token.")] = None,
    role: Annotated[Role, typer.Option(help="viewer, editor or admin.")] = Role.viewer,
    name: Annotated[str, typer.Option(help="What the token is for.")] = "cli",
) -> None:
    """Mint a token. The secret is printed once; only its hash is stored."""
    with client() as api:
        created = api.create_token(TokenCreate(name=name, project=project, role=role))
    console.print(created.token, highlight=False, soft_wrap=True)
    errors.print(
        f"token {created.id} ({created.role}) for "
        f"{project or 'every project'}; store it now, it is not shown again"
    )


@projects_app.command("create")
@friendly_errors
def projects_create(name: str, description: str = "") -> None:
    """Create a project (global admin token needed)."""
    with client() as api:
        project = api.create_project(name, description)
    console.print(f"project {project.name} (id {project.id}, namespace {project.namespace})")


@projects_app.command("ls")
@friendly_errors
def projects_ls() -> None:
    """List the projects this token can see."""
    with client() as api:
        page = api.list_projects()
    table(
        "projects",
        ["ID", "NAME", "NAMESPACE", "AGE"],
        [(p.id, p.name, p.namespace, age(p.created_at)) for p in page.items],
    )


@experiments_app.command("ls")
@friendly_errors
def experiments_ls(project: ProjectOpt = DEFAULT_PROJECT) -> None:
    """List the experiments of a project."""
    with client() as api:
        page = api.list_experiments(project)
    table(
        f"experiments in {project}",
        ["ID", "NAME", "DESCRIPTION", "AGE"],
        [(e.id, e.name, e.description, age(e.created_at)) for e in page.items],
    )


@app.command()
@friendly_errors
def submit(
    file: Annotated[Path, typer.Argument(exists=True, dir_okay=False, readable=True)],
    project: ProjectOpt = DEFAULT_PROJECT,
    backend: Annotated[Backend, typer.Option(help="local or kubernetes.")] = Backend.local,
    code_dir: Annotated[
        Path | None,
        typer.Option(
            file_okay=False,
            help="Directory of the run's code, whose git state is recorded; default: "
            "--package's directory, else the spec's workingDir, else the current directory "
            "(the crucible package for runs without a command).",
        ),
    ] = None,
    package: Annotated[
        Path | None,
        typer.Option(
            help="A directory of the runs' own Python code (or an archive of one): packed "
            "(only what git does not ignore), registered as a `code` artifact and set as "
            "every document's codePackage, so each run finds it first on its PYTHONPATH.",
        ),
    ] = None,
    package_to: Annotated[
        str | None,
        typer.Option(
            help="Where --package is stored, as s3://bucket/prefix or file:///path that every "
            "pod reaches; default: CRUCIBLE_HOME/packages, which only local runs read.",
        ),
    ] = None,
) -> None:
    """Submit the TrainingRun / RolloutJob / EvalJob documents of a YAML file (as for kubectl),
    recording where each run's code came from."""
    from crucible.artifacts.code_package import PackageError
    from crucible.cli import packages

    documents = [d for d in yaml.safe_load_all(file.read_text()) if d is not None]
    if not documents:
        raise CrucibleError(f"{file} holds no YAML documents")
    # Validate every document before submitting any, so a bad file submits nothing.
    requests = []
    captured: dict[Path, CodeSource] = {}
    for index, document in enumerate(documents):
        try:
            request = RunSubmit(project=project, manifest=document, backend=backend)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"][1:])
            raise CrucibleError(
                f"{file} document {index + 1}: {where}: {first['msg']} (got {first.get('input')!r})"
            ) from exc
        if package is not None and request.manifest.spec.code_package is not None:
            _bad_package(
                f"{file} document {index + 1} names codePackage "
                f"{request.manifest.spec.code_package} already; leave out --package or it"
            )
        source = package if package is not None and package.is_dir() else None
        directory = code_directory(request.manifest.spec, code_dir or source)
        if directory not in captured:
            captured[directory] = provenance.capture(directory)
        requests.append(request.model_copy(update={"code": captured[directory]}))
    packed = None
    if package is not None:
        if package_to is not None and not package_to.startswith(("s3://", "file:///")):
            _bad_package(
                f"--package-to must be s3://bucket/prefix or file:///path, not {package_to!r}"
            )
        if package_to is None and backend is Backend.kubernetes:
            _bad_package(
                "pods cannot read this machine's CRUCIBLE_HOME: give --package-to s3://bucket/"
                "prefix (or a file:/// path on storage the pods mount)"
            )
        try:
            packed = packages.load(package)
        except PackageError as exc:
            _bad_package(f"{exc}; nothing was registered")
    with client() as api:
        if packed is not None and package is not None:
            artifact = packages.register(
                api,
                packed,
                project=project,
                name=packages.package_name(package),
                to=package_to,
                home=load_settings().home,
            )
            console.print(
                f"code package {artifact.name}: {packed.files} files, {artifact.digest}, "
                f"registered as artifact {artifact.id}",
                highlight=False,
                soft_wrap=True,
            )
            requests = [with_package(request, artifact) for request in requests]
        for request in requests:
            run = api.submit_run(request)
            console.print(
                f"{request.manifest.kind} {run.name} submitted as run {run.id} ({run.phase})"
            )


@runs_app.command("ls")
@friendly_errors
def runs_ls(
    project: ProjectOpt = DEFAULT_PROJECT,
    experiment: Annotated[int | None, typer.Option(help="Experiment id.")] = None,
    phase: Phase | None = None,
    kind: RunKind | None = None,
    limit: Annotated[int, typer.Option(min=1, max=1000)] = 50,
) -> None:
    """List runs, newest first."""
    with client() as api:
        page = api.list_runs(
            project=project, experiment_id=experiment, phase=phase, kind=kind, limit=limit
        )
    table(
        f"runs in {project}",
        ["ID", "NAME", "KIND", "PHASE", "ATTEMPT", "GPUS", "STEP", "AGE"],
        [
            (
                r.id,
                r.name,
                r.kind,
                r.phase,
                r.attempt_count,
                r.gpus,
                r.latest_step,
                age(r.created_at),
            )
            for r in page.items
        ],
    )


@runs_app.command("show")
@friendly_errors
def runs_show(run_id: int) -> None:
    """Show a run, its attempts and its latest events."""
    with client() as api:
        run = api.get_run(run_id)
        attempts = api.list_attempts(run_id)
        events = api.list_events(run_id)
    console.print(f"[bold]{run.name}[/bold] (run {run.id}, {run.kind}, {run.backend})")
    console.print(f"phase: {run.phase}  reason: {run.reason}  {run.message}")
    console.print(f"gpus: {run.gpus}  step: {run.latest_step}  spec: {run.spec_digest}")
    console.print(f"code: {describe_code(run)}", highlight=False)
    table(
        "attempts",
        ["#", "WHY", "RESUMED FROM", "END", "EXIT", "STARTED", "RAN"],
        [
            (
                a.number,
                a.start_reason,
                a.resumed_from_checkpoint_id,
                a.end_reason,
                a.exit_code,
                a.started_at,
                describe_attempt_code(a),
            )
            for a in attempts
        ],
    )
    table(
        "events",
        ["TIME", "TYPE", "REASON", "MESSAGE"],
        [
            (e.created_at.isoformat(timespec="seconds"), e.type, e.reason, e.message)
            for e in events[-20:]
        ],
    )


@runs_app.command("reproduce")
@friendly_errors
def runs_reproduce(
    run_id: int,
    code_dir: Annotated[
        Path | None,
        typer.Option(
            file_okay=False,
            help="A checkout of the run's code, if not where it was submitted from.",
        ),
    ] = None,
) -> None:
    """Run a run again exactly: its resolved spec, the input versions it read, and its code
    (the image digest its pods ran, or the same git state of its code's directory).
    Refuses, naming what differs, when that code is not to be had."""
    with client() as api:
        run = api.get_run(run_id)
        attempts = api.list_attempts(run_id)
        project = api.get_project(run.project_id).name
        earlier = api.list_runs(
            project=project, tag=f"{resources.TAG_REPRODUCES}={run.id}", limit=1000
        )
        number = len(earlier.items) + 1
        request = reproduction.reproduction(
            run,
            attempts,
            project=project,
            name=reproduction.reproduction_name(run.name, number),
            current_code=reproduction.current_code(run, code_dir),
        )
        reproduction.refuse_deleted_checkpoints(
            run,
            request,
            lambda checkpoint_id: api.get_checkpoint(checkpoint_id).deleted_at is not None,
        )
        new = api.submit_run(request)
    console.print(f"run {run.id} reproduced as run {new.id} {new.name} ({new.phase})")


def _bad_package(message: str) -> NoReturn:
    """A --package that cannot be used: one line, and exit 2 (bad input), as for a bad
    option."""
    errors.print(f"[red]error:[/red] {escape(message)}", highlight=False)
    raise typer.Exit(2)


def with_package(request: RunSubmit, artifact: ArtifactPublic) -> RunSubmit:
    """`request` reading the code package `artifact`, pinned by id, its digest recorded."""
    manifest = request.manifest
    spec = manifest.spec.model_copy(update={"code_package": f"{ARTIFACT_SCHEME}{artifact.id}"})
    code = request.code
    if code is not None:
        package = CodePackage(artifact_id=artifact.id, digest=artifact.digest)
        code = code.model_copy(update={"package": package})
    return request.model_copy(
        update={"manifest": manifest.model_copy(update={"spec": spec}), "code": code}
    )


def describe_code(run: RunPublic) -> str:
    if run.code is None:
        return run.code_ref or "not recorded"
    git = run.code.git
    where = "not in git" if git is None else f"commit {git.commit} of {git.top}"
    if git is not None and git.dirty:
        where += f" with uncommitted changes {git.diff_digest}"
    if run.code.package is not None:
        package = run.code.package
        where += f", code package artifact {package.artifact_id} {package.digest}"
    packages = ", ".join(f"{k} {v}" for k, v in sorted(run.code.packages.items()))
    return f"{run.code.directory}: {where}" + (f" ({packages})" if packages else "")


def describe_attempt_code(attempt: AttemptPublic) -> str:
    parts = [attempt.image_id or ""] if attempt.image_id else []
    if attempt.packages:
        parts.append(" ".join(f"{k}={v}" for k, v in sorted(attempt.packages.items())))
    return "; ".join(parts)


def code_directory(spec: WorkloadSpec, code_dir: Path | None) -> Path:
    """Where a run's code comes from: the reference workloads are the crucible package."""
    if not spec.command:
        return provenance.reference_code_directory()
    if code_dir is not None:
        return code_dir
    return Path(spec.working_dir) if spec.working_dir else Path.cwd()


@runs_app.command("cancel")
@friendly_errors
def runs_cancel(run_id: int) -> None:
    """Cancel a run."""
    with client() as api:
        run = api.cancel_run(run_id)
    console.print(f"run {run.id} {run.phase}")


@runs_app.command("preempt")
@friendly_errors
def runs_preempt(run_id: int) -> None:
    """Preempt a running run like a node drain: it gets SIGTERM, checkpoints and stops."""
    with client() as api:
        run = api.preempt_run(run_id)
    console.print(f"preemption of run {run.id} requested")


@runs_app.command("logs")
@friendly_errors
def runs_logs(
    run_id: int,
    attempt: Annotated[int | None, typer.Option(help="Attempt number; default the latest.")] = None,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Keep printing new lines.")
    ] = False,
) -> None:
    """Print a local run's log (the embedded mode keeps them under CRUCIBLE_HOME/runs)."""
    settings = load_settings()
    with client() as api:
        run = api.get_run(run_id)
        number = attempt or run.attempt_count
        if number < 1:
            raise CrucibleError(f"run {run_id} has not started an attempt yet")
        path = settings.home / "runs" / str(run_id) / f"attempt-{number}.log"
        if not path.exists():
            raise CrucibleError(f"no log at {path}; logs of kubernetes runs are in their pods")

        def attempt_ended() -> bool:
            return api.list_attempts(run_id)[number - 1].ended_at is not None

        follow_log(path, follow=follow, finished=attempt_ended)


@app.command()
@friendly_errors
def lineage(
    entity: Annotated[str, typer.Argument(help="run, checkpoint, dataset_version, eval_result")],
    entity_id: int,
    direction: Annotated[str, typer.Option(help="upstream, downstream or both")] = "both",
    depth: Annotated[int, typer.Option(min=1, max=50)] = 5,
) -> None:
    """Show what an entity came from and what came from it."""
    with client() as api:
        graph: dict[str, Any] = api.lineage(entity, entity_id, direction, depth)
    labels = {(n["type"], n["id"]): n["label"] for n in graph["nodes"]}
    table(
        f"lineage of {entity} {entity_id} ({direction}, depth {depth})",
        ["FROM", "RELATION", "TO"],
        [
            (
                f"{e['source']['type']} {labels.get((e['source']['type'], e['source']['id']), '')}",
                e["relation"],
                f"{e['target']['type']} {labels.get((e['target']['type'], e['target']['id']), '')}",
            )
            for e in graph["edges"]
        ],
    )
