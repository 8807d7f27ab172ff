"""A sweep's search space: paths and ranges checked before any trial, points applied to the
base run's config and checked as a whole config."""

import pytest

from crucible.sweeps.space import (
    Choice,
    FloatRange,
    IntRange,
    SearchSpaceError,
    apply,
    check_point,
    parse_space,
)


def test_a_space_of_choices_and_ranges_parses() -> None:
    space = parse_space(
        {
            "config.train.lr": {"min": 1e-5, "max": 1e-2, "log": True},
            "config.train.batch_size": {"values": [16, 32]},
            "config.train.warmup_steps": {"min": 0, "max": 100},
            "config.online.episode.max_turns": {"values": [2, 4]},
            "config.suite.shots": {"values": [0, 5]},  # a plugin's keyword: its own to check
        }
    )
    assert space == {
        "config.train.lr": FloatRange(1e-5, 1e-2, log=True),
        "config.train.batch_size": Choice((16, 32)),
        "config.train.warmup_steps": IntRange(0, 100),
        "config.online.episode.max_turns": Choice((2, 4)),
        "config.suite.shots": Choice((0, 5)),
    }


@pytest.mark.parametrize(
    ("parameters", "message"),
    [
        (
            {"config.train.lrr": {"values": [1]}},
            "'config.train.lrr': config.train has no key 'lrr'",
        ),
        ({"config.trian.lr": {"values": [1]}}, "'config.trian.lr': config has no section 'trian'"),
        ({"train.lr": {"values": [1]}}, "'train.lr': a path starts with 'config.'"),
        ({"config.train": {"values": [1]}}, "'config.train' names a whole section"),
        (
            {"config.online.episode.turns": {"values": [1]}},
            "config.online.episode has no key 'turns'",
        ),
        ({"config.train.lr": {"min": 0.1, "max": 0.01}}, "min 0.1 must be below max 0.01"),
        ({"config.train.lr": {"min": 0.0, "max": 0.1, "log": True}}, "log range needs min > 0"),
        ({"config.train.lr": {"min": 0.0, "max": float("inf")}}, "max must be a finite number"),
        ({"config.train.lr": {"values": []}}, "values must be a non-empty list"),
        ({"config.train.lr": {"min": 0.1}}, "a range takes min, max and log"),
        ({"config.train.lr": 0.1}, r"give \{values: \[...\]\} or \{min: ..., max: ...\}"),
        ({}, "a sweep needs parameters"),
    ],
)
def test_an_impossible_space_is_refused_naming_the_path(
    parameters: dict[str, object], message: str
) -> None:
    with pytest.raises(SearchSpaceError, match=message):
        parse_space(parameters)


def test_a_point_is_set_at_its_paths_in_a_copy_of_the_base() -> None:
    base = {"train": {"lr": 0.1, "steps": 10}, "model": {"preset": "tiny"}}
    point = {"config.train.lr": 0.01, "config.online.episode.max_turns": 3}
    assert apply(base, point) == {
        "train": {"lr": 0.01, "steps": 10},
        "model": {"preset": "tiny"},
        "online": {"episode": {"max_turns": 3}},
    }
    assert base["train"]["lr"] == 0.1  # the base is left alone


def test_a_point_the_run_config_refuses_is_named() -> None:
    check_point({"train": {"steps": 10}}, {"config.train.lr": 0.01})  # a good one passes
    with pytest.raises(
        SearchSpaceError, match=r"config.train.lr='fast' makes a bad run config: .*config.train.lr"
    ):
        check_point({"train": {"steps": 10}}, {"config.train.lr": "fast"})
