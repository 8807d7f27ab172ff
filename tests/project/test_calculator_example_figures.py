"""Which recorded run of examples/calculator-rl.yaml a machine's rewards are held to: one of
a CPU like it, model name and torch CPU capability both, since either changes the sums."""

from benchmarks.calculator_example_figures import recorded, same_cpu, this_cpu

AVX2 = {"cpu": "AMD EPYC", "torch_cpu_capability": "AVX2"}


def test_a_run_is_held_to_one_recorded_on_the_same_model_and_capability() -> None:
    assert same_cpu(AVX2, {"cpu": "AMD EPYC", "torch_cpu_capability": "AVX2"})


def test_the_same_model_name_with_other_kernels_is_not_the_same_cpu() -> None:
    # The case that failed the example's test: two "AMD EPYC" machines, AVX2 and AVX-512.
    assert not same_cpu(AVX2, {"cpu": "AMD EPYC", "torch_cpu_capability": "AVX512"})
    assert not same_cpu(AVX2, {"cpu": "Intel(R) Xeon(R) Processor", "torch_cpu_capability": "AVX2"})


def test_a_run_recorded_without_its_capability_matches_on_the_name() -> None:
    legacy = {"cpu": "Intel(R) Xeon(R) Processor"}
    assert same_cpu(legacy, {"cpu": "Intel(R) Xeon(R) Processor", "torch_cpu_capability": "X"})
    assert not same_cpu(legacy, {"cpu": "AMD EPYC", "torch_cpu_capability": "X"})


def test_the_results_keep_at_most_one_run_per_cpu() -> None:
    runs = recorded()["runs"]
    for i, run in enumerate(runs):
        others = runs[:i] + runs[i + 1 :]
        here = {"cpu": run["cpu"], "torch_cpu_capability": run.get("torch_cpu_capability", "")}
        assert not any(same_cpu(other, here) for other in others), run["cpu"]
    assert set(this_cpu()) == {"cpu", "torch_cpu_capability"}
