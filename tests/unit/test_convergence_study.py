"""examples/convergence.py's own arithmetic: how a configuration's text becomes knobs,
and how the summary finds the target, the bytes ratio and the time ratio that
docs/performance/convergence.md quotes (the study itself runs by hand: minutes of training
per configuration)."""

import argparse
import sys

import pytest

from mxkv_hybrid.config import KNOBS

from support.paths import EXAMPLES

sys.path.insert(0, str(EXAMPLES))

import convergence


def test_a_configuration_names_knobs_that_exist_and_its_own_learning_rate_and_momentum():
    parsed = convergence.parse_configuration(
        "lasgd tau=128 outer=nesterov outer_momentum=0.5 lr=0.05"
    )
    assert parsed == (
        "lasgd",
        {
            "MXKV_TAU": "128",
            "MXKV_OUTER": "nesterov",
            "MXKV_OUTER_MOMENTUM": "0.5",
        },
        0.05,
        0.9,
    )
    assert convergence.parse_configuration("async momentum=0.4").momentum == 0.4
    assert set(convergence.SETTINGS.values()) <= set(KNOBS)
    for configurations in convergence.DEFAULT_CONFIGURATIONS.values():
        for text in configurations:
            _mode, env, *_ = convergence.parse_configuration(text)
            assert set(env) <= set(KNOBS), text
    streaming = convergence.parse_configuration(
        "lasgd tau=128 outer=nesterov fragments=4 overlap=1"
    )
    assert streaming.env == {
        "MXKV_TAU": "128",
        "MXKV_OUTER": "nesterov",
        "MXKV_FRAGMENTS": "4",
        "MXKV_LASGD_OVERLAP": "1",
    }
    with pytest.raises(argparse.ArgumentTypeError, match="'tua=4' is not NAME=VALUE"):
        convergence.parse_configuration("easgd tua=4")
    with pytest.raises(argparse.ArgumentTypeError, match="the mode is one of"):
        convergence.parse_configuration("diloco tau=4")


def job(configuration: str, seed: int, accuracies, seconds, megabytes, final: float) -> dict:
    epochs = [
        {"epoch": e + 1, "accuracy": a, "seconds": s, "cross_group_bytes": b * 1e6}
        for e, (a, s, b) in enumerate(zip(accuracies, seconds, megabytes))
    ]
    return {
        "configuration": configuration,
        "seed": seed,
        "link_mbps": 50.0,
        "epochs": epochs,
        "final_accuracy": final,
        "cross_group_bytes": megabytes[-1] * 1e6 + 1e6,
    }


def test_the_summary_measures_both_against_allreduces_final_accuracy_less_the_margin():
    results = [
        job("allreduce", 1, [0.5, 0.9, 0.95], [10, 20, 30], [100, 200, 300], 0.95),
        job("allreduce", 2, [0.5, 0.8, 0.93], [10, 20, 30], [100, 200, 300], 0.93),
        job("lasgd", 1, [0.6, 0.94, 0.95], [2, 4, 6], [1, 2, 3], 0.95),
        job("lasgd", 2, [0.6, 0.92, 0.95], [2, 4, 6], [1, 2, 3], 0.95),
    ]
    allreduce, lasgd = convergence.summarise(results, within=0.01)
    assert allreduce["target"] == pytest.approx(0.93)  # mean of 0.95 and 0.93, less 0.01
    assert allreduce["epoch_at_target"] == 3 and allreduce["seconds_to_target"] == 30
    assert lasgd["epoch_at_target"] == 2  # the mean of the seeds' curves: 0.93 at epoch 2
    assert lasgd["sooner"] == pytest.approx(30 / 4)
    assert lasgd["bytes_ratio"] == pytest.approx(301 / 4)  # the consensus's bytes included
    assert lasgd["mean_final_accuracy"] == pytest.approx(0.95)


def test_where_every_run_evaluated_the_average_model_the_target_is_read_from_it():
    runs = [
        job("allreduce", 1, [0.5, 0.9, 0.95], [10, 20, 30], [100, 200, 300], 0.95),
        job("lasgd", 1, [0.5, 0.6, 0.95], [2, 4, 6], [1, 2, 3], 0.95),
    ]
    for run, averages in zip(runs, ([0.5, 0.9, 0.95], [0.7, 0.95, 0.95])):
        for epoch, average in zip(run["epochs"], averages):
            epoch["average_accuracy"] = average
    _allreduce, lasgd = convergence.summarise(runs, within=0.01)
    assert lasgd["measured"] == "average_accuracy" and lasgd["epoch_at_target"] == 2
    assert lasgd["sooner"] == pytest.approx(30 / 4)  # rank 0's own model: epoch 3, 5x


def test_the_peak_bytes_of_a_step_are_the_most_any_seed_sent_and_absent_from_older_runs():
    runs = [job("lasgd", seed, [0.9], [1], [1], 0.9) for seed in (1, 2)]
    older = job("lasgd", 3, [0.9], [1], [1], 0.9)
    runs[0]["peak_step_bytes"], runs[1]["peak_step_bytes"] = 2e5, 3e5
    (row,) = convergence.summarise(runs, within=0.01)
    assert row["peak_step_bytes"] == 3e5
    (row,) = convergence.summarise(runs + [older], within=0.01)
    assert row["peak_step_bytes"] is None
    assert "   -    " in convergence.table([row], within=0.01)
