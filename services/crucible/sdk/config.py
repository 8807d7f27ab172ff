"""What the operator or the local executor tells a workload, read from the environment.

The API URL, token and home directory come from `crucible.settings`; these are the fields
only a workload process has.
"""

from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class RunEnvironment(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="CRUCIBLE_", extra="ignore")

    run_id: int | None = Field(default=None, ge=1, description="The run this process serves.")
    attempt: int | None = Field(
        default=None, ge=1, description="The attempt number; stamped on checkpoints, heartbeats."
    )
    resume_from: str | None = Field(
        default=None,
        description="Checkpoint id or URI to resume from; default: the run's latest checkpoint.",
    )
    outputs_dir: Path | None = Field(
        default=None,
        description="Where the run writes the files it publishes (on Kubernetes, a volume "
        "every pod reaches); default: $CRUCIBLE_HOME/runs/<run_id>/outputs.",
    )
    outputs_uri: str | None = Field(
        default=None,
        description="Object storage (s3://...) that published files are copied under and "
        "registered from, so pods without a shared volume read them; default: none, files "
        "are registered where they are written.",
    )
    checkpoint_uri: str | None = Field(
        default=None,
        description="Prefix under which checkpoints go; default: "
        "file://$CRUCIBLE_HOME/runs/<run_id>/checkpoints.",
    )
    heartbeat_interval: float = Field(
        default=15.0,
        ge=0,
        description="Seconds between heartbeats, which also bring live profile requests; 0: none.",
    )
    system_metrics_interval: float = Field(
        default=10.0,
        ge=0,
        description="Seconds between readings of the run's GPUs as system metrics; 0: none.",
    )
