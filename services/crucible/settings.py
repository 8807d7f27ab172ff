"""Configuration from the environment. Built by `load_settings()`, never at import time."""

from functools import cached_property
from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from crucible.domain.storage_uris import location_of

DEFAULT_HOME = Path.home() / ".crucible"
DEFAULT_PROJECT = "default"  # created by the embedded mode; the CLI's default --project


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="CRUCIBLE_", extra="ignore")

    home: Path = Field(default=DEFAULT_HOME, description="Local state: SQLite DB, token, logs.")
    database_url: str | None = Field(
        default=None, description="SQLAlchemy URL; default: SQLite file under home."
    )
    broker_url: str | None = Field(default=None, description="Celery broker (redis://...).")
    api_url: str = Field(default="http://127.0.0.1:8080", description="Control-plane URL.")
    token: SecretStr | None = Field(default=None, description="Client API token.")
    admin_token: SecretStr | None = Field(
        default=None, description="Accepted as a global admin token (automation, tests)."
    )
    max_body_bytes: int = Field(
        default=16 * 1024 * 1024, description="Requests with a larger body get 413."
    )
    web_dir: Path | None = Field(
        default=None, description="Built dashboard to serve at /; default: web/dist of a checkout."
    )
    storage_roots: list[str] = Field(
        default_factory=list,
        description="Storage roots (file:// or s3:// prefixes, a JSON list, e.g. "
        '`["s3://team-ckpt/", "file:///checkpoints/"]`) that checkpoints, datasets and '
        "artifacts must live under, each laid out as `runs/<run id>/` (what the platform gives "
        "a run), `projects/<project id>/` (a project's own) and shared storage (the rest, not "
        "for checkpoints); the home is always one. Empty: the home is the only one.",
    )
    mlflow_artifact_root: str | None = Field(
        default=None,
        description="Where artifacts MLflow clients upload through the artifact proxy are kept "
        "(a file:// or s3:// URI); default: `mlflow/` under the first storage root, or "
        "`mlflow-artifacts/` under home.",
    )
    auth_failure_limit: int = Field(
        default=30,
        ge=1,
        description="Failed token or sign-in code checks one client IP may make per window; "
        "past it the API answers 429 with Retry-After.",
    )
    auth_failure_window_seconds: float = Field(default=60.0, gt=0)
    token_max_lifetime_days: float | None = Field(
        default=None,
        gt=0,
        description="Longest lifetime of a token created through the API; a token asked for "
        "without an expiry gets this one. Unset: tokens may live forever.",
    )
    trusted_proxies: str = Field(
        default="",
        description="Comma-separated addresses or networks of reverse proxies whose "
        "X-Forwarded-For and X-Forwarded-Proto are believed (uvicorn's forwarded_allow_ips); "
        "empty: the client address is the connection's, whatever a request's headers say.",
    )
    run_isolation: Literal["auto", "namespaces", "none"] = Field(
        default="auto",
        description="How `crucible up`'s executor confines each local run (docs/local-mode.md): "
        "`namespaces` runs it in Linux user, mount and PID namespaces where it sees only its "
        "project's folders of the home (never the admin token or the database) and not the "
        "executor's processes, or refuses to start where they cannot be made; `none` runs it "
        "as the executor's user with the home in reach (single-tenant); `auto` isolates where a "
        "probe at start shows it works and warns otherwise.",
    )
    db_pool_size: int = Field(default=10, ge=1)
    db_pool_timeout_seconds: float = Field(
        default=10.0,
        gt=0,
        description="A request waiting longer for a free database connection gets 503.",
    )
    drift_settle_seconds: float = Field(
        default=60.0,
        ge=0,
        description="A Kubernetes run unchanged this long whose resource is gone is Cancelled.",
    )
    relay_republish_after_seconds: float = Field(
        default=30.0,
        gt=0,
        description="The outbox relay publishes a message no worker has handled again after "
        "this long, then after waits that double (a broker that lost it, a worker killed "
        "holding it).",
    )
    broker_visibility_timeout_seconds: float = Field(
        default=300.0,
        gt=0,
        description="Redis gives a task that a worker took and never acknowledged (it died) to "
        "another worker after this long; keep it above the slowest handler, or a live one's "
        "task is delivered twice.",
    )

    @field_validator("storage_roots", mode="after")
    @classmethod
    def _usable_roots(cls, value: list[str]) -> list[str]:
        unusable = [root for root in value if location_of(root) is None]
        if unusable:
            raise ValueError(f"storage roots {unusable} are not file:/// or s3:// URIs")
        return value

    @field_validator("home", mode="after")
    @classmethod
    def _expand_home(cls, value: Path) -> Path:
        return value.expanduser()

    @cached_property
    def resolved_database_url(self) -> str:
        return self.database_url or f"sqlite:///{self.home / 'crucible.db'}"

    @property
    def is_sqlite(self) -> bool:
        return self.resolved_database_url.startswith("sqlite")

    @property
    def resolved_mlflow_artifact_root(self) -> str:
        if self.mlflow_artifact_root:
            return self.mlflow_artifact_root.rstrip("/")
        if self.storage_roots:
            return self.storage_roots[0].rstrip("/") + "/mlflow"
        return (self.home / "mlflow-artifacts").absolute().as_uri()

    @property
    def local_token_file(self) -> Path:
        """Where the embedded mode saves the admin token for this user's CLI."""
        return self.home / "token"


def load_settings(**overrides: object) -> Settings:
    return Settings(**overrides)  # type: ignore[arg-type]
