"""The `openai-endpoint` teacher: a model behind an OpenAI-compatible endpoint, `crucible
serve` of a stronger checkpoint or any server speaking `/v1/completions` (vLLM, SGLang, a
hosted API), named by URL.

The prompts go in batches, each one `POST {url}/completions` with a list of prompts; the
answers come back in prompt order. A connection that fails is tried again a few times (a
server that restarts or rolls to a newer checkpoint drops a request or two); an answer of 4xx
is the spec's fault (a model the endpoint does not serve, a wrong key) and ends the job as a
bad config, with the server's own message.
"""

import os
import time
from collections.abc import Sequence
from typing import Any

import httpx

from crucible.config.parse import ConfigError

ATTEMPTS = 4
"""Tries per batch when the connection fails or the server answers 5xx."""


class EndpointError(Exception):
    """The endpoint could not be reached, or kept failing."""


class EndpointRefused(ConfigError):
    """The endpoint answered 4xx: the request is wrong (a model it does not serve, a bad
    key, a prompt too long), and trying again would not help."""


def openai_endpoint(
    prompts: Sequence[str],
    *,
    url: str,
    model: str,
    max_tokens: int = 64,
    temperature: float = 0.0,
    api_key_env: str | None = None,
    batch_size: int = 32,
    timeout: float = 300.0,
) -> list[str]:
    """One completion per prompt from the endpoint at `url` (its `/v1` base, as OpenAI
    clients take it). The key, when the endpoint wants one, is read from the environment
    variable `api_key_env`: a spec holds no secret."""
    headers = {}
    if api_key_env is not None:
        key = os.environ.get(api_key_env)
        if not key:
            raise EndpointRefused(
                f"teacher openai-endpoint: api_key_env names {api_key_env}, which is not set"
            )
        headers["Authorization"] = f"Bearer {key}"
    answers: list[str] = []
    with httpx.Client(base_url=url.rstrip("/"), headers=headers, timeout=timeout) as client:
        for start in range(0, len(prompts), batch_size):
            batch = list(prompts[start : start + batch_size])
            body = {
                "model": model,
                "prompt": batch,
                "max_tokens": max_tokens,
                "temperature": temperature,
            }
            choices: list[dict[str, Any]] = _post(client, body)["choices"]
            if len(choices) != len(batch):
                raise EndpointError(
                    f"{url} answered {len(choices)} choices for {len(batch)} prompts"
                )
            answers.extend(c["text"] for c in sorted(choices, key=lambda c: c["index"]))
    return answers


def _post(client: httpx.Client, body: dict[str, Any]) -> dict[str, Any]:
    for attempt in range(ATTEMPTS):
        last = attempt == ATTEMPTS - 1
        try:
            answer = client.post("/completions", json=body)
        except httpx.TransportError as exc:
            if last:
                raise EndpointError(f"{client.base_url}: {exc}") from exc
        else:
            if answer.status_code < 500:
                if answer.is_error:
                    raise EndpointRefused(
                        f"teacher openai-endpoint: {client.base_url}/completions answered "
                        f"{answer.status_code}: {answer.text[:500]}"
                    )
                return answer.json()  # type: ignore[no-any-return]
            if last:
                raise EndpointError(
                    f"{client.base_url}/completions answered {answer.status_code} "
                    f"{ATTEMPTS} times: {answer.text[:500]}"
                )
        time.sleep(2**attempt)
    raise AssertionError("unreachable")
