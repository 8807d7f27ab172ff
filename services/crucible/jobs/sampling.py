"""How a rollout or a model teacher samples: config.rollout with the spec on top, and new
tokens cut to the model's context."""

import dataclasses
import logging
from collections.abc import Sequence

from crucible.config.parse import SECTIONS, ConfigError, given_fields, validated
from crucible.config.workload import RolloutConfig
from crucible.jobs.env import JobEnv

log = logging.getLogger("crucible.jobs")

SPEC_SAMPLING: dict[str, str] = {
    "samplesPerPrompt": "samples_per_prompt",
    "sampling.temperature": "temperature",
    "sampling.topP": "top_p",
    "sampling.maxNewTokens": "max_new_tokens",
}
"""Where in the spec -> the config.rollout field it sets."""


def rollout_config(env: JobEnv) -> RolloutConfig:
    """config.rollout with the spec's `samplesPerPrompt` and `sampling` winning."""
    in_spec = {"samplesPerPrompt": env.spec.get("samplesPerPrompt")}
    in_spec |= {f"sampling.{key}": value for key, value in env.spec_object("sampling").items()}
    overrides = {
        field: in_spec[key] for key, field in SPEC_SAMPLING.items() if in_spec.get(key) is not None
    }
    spec_path = {field: f"spec.{key}" for key, field in SPEC_SAMPLING.items()}
    checked = validated(SECTIONS["rollout"], "spec", overrides, names=spec_path)
    return dataclasses.replace(env.config.rollout, **given_fields(checked))


def fit_new_tokens(max_new_tokens: int, max_seq_len: int, prompt_lengths: Sequence[int]) -> int:
    """`max_new_tokens`, cut so that the longest prompt (`prompt_lengths`: tokens, BOS
    included) plus its completion fits the model's context of `max_seq_len` positions (the
    spec's default of 64 new tokens does not fit a 64-position model)."""
    longest = max(prompt_lengths, default=0)
    room = max_seq_len - longest
    if room < 1:
        raise ConfigError(
            f"a prompt of {longest} tokens leaves no room in the model's context of "
            f"{max_seq_len} positions"
        )
    if max_new_tokens > room:
        log.info(
            "max_new_tokens %d cut to %d: the model's context is %d positions",
            max_new_tokens,
            room,
            max_seq_len,
        )
    return min(max_new_tokens, room)
