"""The names of a run's token and its Secret, as the API, the chart's admission policy and a
restarted operator read them; and when a loop must look for tokens it did not mint."""

import re
from pathlib import Path

import pytest

from crucible.domain.enums import Phase
from crucible.schemas.tenancy import TokenCreate
from crucible_operator import naming, run_tokens

POLICY = (
    Path(__file__).resolve().parents[2]
    / "helm"
    / "crucible"
    / "templates"
    / "workload-token-policy.yaml"
)
DNS_1123 = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def test_the_charts_policy_admits_the_secret_of_every_run_and_nothing_else() -> None:
    (pattern,) = re.findall(r'\$runSecret := "([^"]+)"', POLICY.read_text())
    for run_id in (1, 12, 987654321):
        name = naming.run_token_secret(run_id)
        assert re.fullmatch(pattern, name) and DNS_1123.match(name) and len(name) <= 253
    for other in ("crucible-workload-token", "crucible-run--token", "crucible-run-1-token-x"):
        assert not re.fullmatch(pattern, other)


def test_a_token_name_is_one_the_api_takes_and_names_its_run_again() -> None:
    name = naming.run_token_name(42)
    TokenCreate(name=name, project="team", role="editor")  # refuses a name it cannot keep
    match = naming.RUN_TOKEN_NAME.match(name)
    assert match is not None and int(match.group(1)) == 42
    # The local executor's tokens are not the operator's to revoke.
    assert naming.RUN_TOKEN_NAME.match("local executor: run 42 attempt 1") is None
    assert naming.RUN_TOKEN_NAME.match("kubernetes run 42 (copy)") is None


@pytest.mark.parametrize(
    ("phase", "attempts", "maybe"),
    [
        (Phase.Pending, 0, False),
        (Phase.WaitingForInputs, 0, False),
        # Reported Scheduling, then the operator stopped: a token may be out there.
        (Phase.Scheduling, 0, True),
        (Phase.Scheduling, 1, True),  # recovery's next attempt
        (Phase.WaitingForInputs, 2, True),
    ],
)
def test_a_loop_looks_for_tokens_it_did_not_mint_once_the_run_was_scheduled(
    phase: Phase, attempts: int, maybe: bool
) -> None:
    assert run_tokens.minted_before(phase, attempts) is maybe
