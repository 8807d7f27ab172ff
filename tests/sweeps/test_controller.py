"""The sweep controller's decisions from its trials' state: trials started up to the
concurrency and the budget, ASHA's stops of running trials with the reason, ended trials'
values kept in the rungs, the end of the sweep, and the best among the trials not stopped."""

import pytest

from crucible.sweeps.controller import Stop, SweepController, TrialState
from crucible.sweeps.plan import TrialResult, parse_plan


def plan(trials: int = 4, concurrency: int = 2, stopping: bool = True) -> SweepController:
    spec = {
        "method": "grid",
        "metric": {"name": "loss", "goal": "minimize"},
        "budget": {"trials": trials, "concurrency": concurrency},
        "parameters": {"config.train.lr": {"values": [0.1, 0.01, 0.001, 0.0001]}},
    }
    if stopping:
        spec["early_stopping"] = {"min_steps": 10, "max_steps": 40, "reduction_factor": 2}
    return SweepController(parse_plan(spec))


def trial(number: int, *points: tuple[int, float], ended: bool = False) -> TrialState:
    return TrialState(number=number, run_id=100 + number, ended=ended, points=list(points))


def test_trials_start_up_to_the_concurrency_then_as_places_free() -> None:
    controller = plan()
    assert controller.decide([]).start == [0, 1]
    assert controller.decide([trial(0), trial(1)]).start == []
    assert controller.decide([trial(0, ended=True), trial(1)]).start == [2]
    done = [trial(n, ended=True) for n in range(4)]
    assert controller.decide(done).start == []


def test_the_sweep_is_finished_when_the_budget_has_started_and_ended() -> None:
    controller = plan(trials=2)
    assert not controller.decide([trial(0, ended=True)]).finished
    assert not controller.decide([trial(0, ended=True), trial(1)]).finished
    assert controller.decide([trial(0, ended=True), trial(1, ended=True)]).finished


def test_a_running_trial_worse_at_a_rung_is_stopped_with_the_reason_once() -> None:
    controller = plan()
    assert controller.decide([trial(0, (10, 1.0))]).stop == []
    actions = controller.decide([trial(0, (10, 1.0)), trial(1, (5, 3.0), (10, 2.0))])
    assert actions.stop == [
        Stop(
            1,
            101,
            "stopped by ASHA at step 10 (rung 10): loss 2 is not among the best 1 of 2 "
            "trials there (cutoff 1, minimize)",
        )
    ]
    # Its place goes to the next trial at once, and it is not stopped twice.
    assert actions.start == [2]
    again = controller.decide([trial(0, (10, 1.0)), trial(1, (10, 2.0), (12, 0.1))])
    assert again.stop == []


def test_an_ended_trial_fills_the_rungs_and_is_not_stopped() -> None:
    controller = plan()
    actions = controller.decide([trial(0, (10, 1.0), ended=True), trial(1, (10, 2.0), ended=True)])
    assert actions.stop == []
    # Trial 1's value is at rung 10, so a third trial is judged against both.
    assert controller.asha is not None
    assert controller.asha.values[10] == {"0": 1.0, "1": 2.0}


def test_without_early_stopping_nothing_is_stopped() -> None:
    controller = plan(stopping=False)
    actions = controller.decide([trial(0, (10, 1.0)), trial(1, (10, 9.0))])
    assert actions.stop == []


def test_the_best_is_among_the_trials_not_stopped() -> None:
    controller = plan()
    trials = [trial(0, (10, 1.0), (40, 0.5)), trial(1, (10, 2.0))]
    controller.decide(trials)
    trials = [trial(0, (10, 1.0), (40, 0.5), ended=True), trial(1, (10, 0.1), ended=True)]
    results = controller.results(trials)
    assert results == [TrialResult(0, 0.5), TrialResult(1, None)]
    assert controller.plan.best(results) == TrialResult(0, 0.5)


def test_trials_out_of_order_are_refused() -> None:
    with pytest.raises(ValueError, match=r"numbered 0 up in order, got \[1\]"):
        plan().decide([trial(1)])
