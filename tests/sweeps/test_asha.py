"""ASHA's decisions: the best 1/eta at each rung go on, the rest stop with a reason; the
first trial at a rung always goes on; the state survives a restart."""

import math

import pytest

from crucible.sweeps.asha import Asha


def asha(goal: str = "maximize") -> Asha:
    return Asha(metric="eval/accuracy", goal=goal, min_resource=10, max_resource=100)


def test_rungs_grow_by_the_reduction_factor_below_the_maximum() -> None:
    assert asha().rungs == [10, 30, 90]
    assert Asha("loss", "minimize", 1, 16, reduction_factor=2).rungs == [1, 2, 4, 8]


def test_only_the_best_third_at_a_rung_goes_on() -> None:
    stopper = asha()
    assert stopper.report("a", 10, 0.5).go_on  # first at the rung: nothing to compare
    assert not stopper.report("b", 10, 0.4).go_on  # 2 seen: best 1 goes on
    assert stopper.report("c", 10, 0.6).go_on
    decisions = [stopper.report(t, 10, v) for t, v in (("d", 0.1), ("e", 0.2), ("f", 0.55))]
    # d and e are judged among 4 and 5 (the best 1 goes on), f among 6 (the best 2).
    assert [d.go_on for d in decisions] == [False, False, True]
    assert decisions[0].reason == (
        "stopped by ASHA at step 10 (rung 10): eval/accuracy 0.1 is not among the best 1 of "
        "4 trials there (cutoff 0.6, maximize)"
    )


def test_a_trial_is_judged_at_every_rung_it_passed_once() -> None:
    stopper = asha(goal="minimize")
    assert stopper.report("a", 35, 1.0).go_on  # judged at rungs 10 and 30, first at both
    assert stopper.report("b", 12, 0.5).go_on  # better at rung 10
    assert not stopper.report("b", 31, 2.0).go_on  # worse than a at rung 30
    assert stopper.report("a", 40, 9.0).go_on  # a is not judged again at 10 or 30
    assert stopper.values == {10: {"a": 1.0, "b": 0.5}, 30: {"a": 1.0, "b": 2.0}}


def test_a_non_finite_metric_stops_the_trial_with_the_reason() -> None:
    decision = asha().report("a", 10, math.nan)
    assert not decision.go_on and decision.reason == "eval/accuracy is nan at step 10"


def test_a_restarted_stopper_judges_as_the_first_would_have() -> None:
    first = asha()
    for trial, value in (("a", 0.5), ("b", 0.7), ("c", 0.6)):
        first.report(trial, 10, value)
    second = asha()
    second.load_state_dict(first.state_dict())
    assert second.report("d", 10, 0.65).go_on == first.report("d", 10, 0.65).go_on is False


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"goal": "max"}, "goal must be maximize or minimize, got 'max'"),
        ({"min_resource": 0}, "min_resource must be >= 1, got 0"),
        ({"max_resource": 10}, r"max_resource \(10\) must be above min_resource \(10\)"),
        ({"reduction_factor": 1}, "reduction_factor must be >= 2, got 1"),
    ],
)
def test_bad_settings_are_refused_naming_the_value(
    changes: dict[str, object], message: str
) -> None:
    fields: dict[str, object] = {
        "metric": "loss",
        "goal": "minimize",
        "min_resource": 10,
        "max_resource": 100,
    }
    with pytest.raises(ValueError, match=message):
        Asha(**{**fields, **changes})  # type: ignore[arg-type]
