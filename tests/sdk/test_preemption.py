"""SIGTERM (a preemption or node drain) asks the loop to checkpoint, then exit 143."""

import os
import signal
from pathlib import Path
from types import FrameType

import pytest

import crucible
from crucible.sdk import PREEMPTED_EXIT_CODE
from tests.sdk.conftest import free_port


def test_sigterm_sets_should_checkpoint_and_chains_the_previous_handler(
    sdk_env: Path,
) -> None:
    seen: list[int] = []

    def previous(signum: int, frame: FrameType | None) -> None:
        seen.append(signum)

    original = signal.signal(signal.SIGTERM, previous)
    try:
        run = crucible.init(run_id=1, api_url=f"http://127.0.0.1:{free_port()}")
        assert not run.should_checkpoint()
        os.kill(os.getpid(), signal.SIGTERM)
        assert run.should_checkpoint() and run.preempted
        assert seen == [signal.SIGTERM], "the handler installed before still runs"
        with pytest.raises(SystemExit) as exited:
            run.finish(preempted=True, timeout=0.1)
        assert exited.value.code == PREEMPTED_EXIT_CODE == 143
        assert signal.getsignal(signal.SIGTERM) is previous, "finish restores the handler"
    finally:
        signal.signal(signal.SIGTERM, original)
