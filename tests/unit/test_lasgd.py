"""MXKV_MODE=lasgd and the explicit averager, in one process: bad MXKV_OUTER, MXKV_FRAGMENTS,
MXKV_LASGD_OVERLAP and PeriodicModelAverager settings refused, a checkpoint written with
other averaging settings refused, the averages' algorithm under auto, and
tests/support/averaging_reference.py's own cases."""

import mxnet as mx
import numpy as np
import pytest

import mxkv_hybrid
from mxkv_hybrid.config import LASGD_OVERLAP_MAX_DELAY, Config
from mxkv_hybrid.errors import ConfigError, MXKVError
from mxkv_hybrid.modes.averaging import check_saved_with
from mxkv_hybrid.modes.local_lr_scale import local_lr_scale, rule_scale, scaled
from mxkv_hybrid.modes.local_sgd import DeviceSum, averages_config

from support import averaging_reference as reference

RANKS, TAU, WARMUP, STEPS = 3, 2, 2, 9


def test_an_outer_optimizer_and_fragments_outside_their_modes_are_refused():
    for mode in ("sync", "async", "allreduce"):
        with pytest.raises(
            ConfigError,
            match="MXKV_OUTER=nesterov is built for MXKV_MODE=lasgd "
            "or easgd, and this job has MXKV_MODE=",
        ):
            Config.from_environment({"MXKV_MODE": mode, "MXKV_OUTER": "nesterov"})
    for mode in ("easgd", "sync", "allreduce"):
        with pytest.raises(ConfigError, match="MXKV_FRAGMENTS=2 is built for MXKV_MODE=lasgd, "):
            Config.from_environment({"MXKV_MODE": mode, "MXKV_FRAGMENTS": "2"})


def test_1_bit_averages_are_refused_outside_lasgd_naming_the_gradients_alternative():
    with pytest.raises(
        ConfigError,
        match=r"MXKV_COMPRESS=1bit quantises the model averages of MXKV_MODE=lasgd, and this "
        r"job has MXKV_MODE=easgd: use fp16 or bf16, or quantise gradients with "
        r"set_gradient_compression\(\{'type': '1bit'\}\)",
    ):
        Config.from_environment({"MXKV_MODE": "easgd", "MXKV_COMPRESS": "1bit"})
    assert (
        Config.from_environment({"MXKV_MODE": "lasgd", "MXKV_COMPRESS": "1bit"}).compress_dtype
        == -1
    )


def test_an_outer_learning_rate_of_0_is_refused():
    """(The rule's momentum, 1 - lr, would be 1: a step that never settles.)"""
    with pytest.raises(
        ConfigError, match="MXKV_OUTER_LR='0' is invalid: expected a number above 0"
    ):
        Config.from_environment({"MXKV_MODE": "lasgd", "MXKV_OUTER_LR": "0"})


def test_the_local_learning_rate_scale_s_rule_and_where_it_is_refused():
    """sqrt(max(1 / ranks, min(1, 16 / tau))): 1 up to tau 16, down to one rank's batch."""
    assert [round(rule_scale(tau, 4), 3) for tau in (1, 4, 16, 32, 64, 128, 1024)] == [
        1.0,
        1.0,
        1.0,
        0.707,
        0.5,
        0.5,
        0.5,
    ]
    assert rule_scale(128, 1) == 1.0 and round(rule_scale(1024, 64), 3) == 0.125
    assert local_lr_scale(0.3, 128, 4, announce=False) == 0.3  # the user's value wins
    assert Config.from_environment({"MXKV_MODE": "lasgd"}).local_lr_scale is None
    with pytest.raises(ConfigError, match="MXKV_LOCAL_LR_SCALE='0' is invalid: expected a"):
        Config.from_environment({"MXKV_MODE": "lasgd", "MXKV_LOCAL_LR_SCALE": "0"})
    easgd = Config.from_environment({"MXKV_MODE": "easgd", "MXKV_LOCAL_LR_SCALE": "0.5"})
    assert easgd.local_lr_scale == 0.5  # a group's local steps
    for mode in ("sync", "async", "allreduce"):
        with pytest.raises(
            ConfigError, match=r"MXKV_LOCAL_LR_SCALE=0\.5 is built for MXKV_MODE=lasgd or easgd, "
        ):
            Config.from_environment({"MXKV_MODE": mode, "MXKV_LOCAL_LR_SCALE": "0.5"})


def test_local_steps_take_the_device_sum_times_the_scale():
    gradients = [mx.nd.array([1.0, 2.0]), mx.nd.array([3.0, 4.0])]
    scaled(DeviceSum(), 0.5).allreduce("local", ["w"], [gradients], [gradients], average=False)
    assert [g.asnumpy().tolist() for g in gradients] == [[2.0, 3.0], [2.0, 3.0]]


def test_fragments_must_divide_tau():
    with pytest.raises(
        ConfigError,
        match="MXKV_TAU=6 is not a multiple of it: make MXKV_TAU a multiple of MXKV_FRAGMENTS",
    ):
        Config.from_environment({"MXKV_MODE": "lasgd", "MXKV_TAU": "6", "MXKV_FRAGMENTS": "4"})
    assert (
        Config.from_environment(
            {"MXKV_MODE": "lasgd", "MXKV_TAU": "8", "MXKV_FRAGMENTS": "4"}
        ).fragments
        == 4
    )
    with pytest.raises(
        ValueError, match="fragments must be a whole number >= 1 that divides period 4, got 3"
    ):
        mxkv_hybrid.PeriodicModelAverager(period=4, fragments=3)


@pytest.mark.parametrize("overlap", [False, True])
def test_the_streaming_reference_with_one_fragment_is_lasgd(overlap):
    """The numpy reference itself: one fragment is plain lasgd, and with the outer
    optimizer (blocking) lasgd_outer."""
    plain = reference.lasgd(STEPS, RANKS, TAU, WARMUP, overlap, "nag")
    streaming = reference.streaming_lasgd(STEPS, RANKS, TAU, WARMUP, overlap, "nag", 1)
    for a, b in zip(plain, streaming):
        np.testing.assert_allclose(a["weights"], b["weights"], rtol=0, atol=1e-12)
    np.testing.assert_allclose(
        streaming[-1]["consensus"], reference.consensus_of_lasgd(plain[-1], overlap), atol=1e-12
    )
    outer = reference.lasgd_outer(STEPS, RANKS, TAU, WARMUP, "nag", "nesterov", 0.7, 0.9)
    streaming = reference.streaming_lasgd(
        STEPS, RANKS, TAU, WARMUP, False, "nag", 1, "nesterov", 0.7, 0.9
    )
    for a, b in zip(outer, streaming):
        np.testing.assert_allclose(a["weights"], b["weights"], rtol=0, atol=1e-12)


def test_an_outer_optimizer_with_lr_1_and_no_momentum_is_plain_averaging():
    plain = reference.lasgd(STEPS, RANKS, TAU, WARMUP, False, "sgd")
    outer = reference.lasgd_outer(STEPS, RANKS, TAU, WARMUP, "sgd", "sgd", 1.0, 0.0)
    for a, b in zip(plain, outer):
        np.testing.assert_allclose(a["weights"], b["weights"], rtol=0, atol=1e-12)


@pytest.mark.parametrize(
    "arguments, message",
    [
        ({"period": 0}, "period must be a whole number >= 1, got 0"),
        ({"period": 2.5}, "period must be a whole number >= 1, got 2.5"),
        ({"period": 4, "warmup_steps": -1}, "warmup_steps must be a whole number >= 0, got -1"),
    ],
)
def test_periodic_model_averager_refuses_bad_arguments(arguments, message):
    with pytest.raises(ValueError, match=message):
        mxkv_hybrid.PeriodicModelAverager(**arguments)


def test_periodic_model_averager_warns_that_period_one_is_gradient_averaging():
    with pytest.warns(UserWarning, match="period=1 averages the whole model after every step"):
        mxkv_hybrid.PeriodicModelAverager(period=1)


def test_unknown_lasgd_overlap_setting_is_refused():
    with pytest.raises(ConfigError, match="MXKV_LASGD_OVERLAP='maybe' is invalid"):
        Config.from_environment({"MXKV_MODE": "lasgd", "MXKV_LASGD_OVERLAP": "maybe"})


def test_overlapped_averaging_is_refused_with_the_naive_engine():
    with pytest.raises(ConfigError, match="set MXKV_LASGD_OVERLAP=0 or unset MXNET_ENGINE_TYPE"):
        Config.from_environment({"MXKV_MODE": "lasgd", "MXNET_ENGINE_TYPE": "NaiveEngine"})
    assert not Config.from_environment(
        {"MXKV_MODE": "lasgd", "MXKV_LASGD_OVERLAP": "0", "MXNET_ENGINE_TYPE": "NaiveEngine"}
    ).lasgd_overlap
    # where the rule blocks, nothing is overlapped that the naive engine could not run
    long_period = str(LASGD_OVERLAP_MAX_DELAY + 1)
    assert not Config.from_environment(
        {"MXKV_MODE": "lasgd", "MXKV_TAU": long_period, "MXNET_ENGINE_TYPE": "NaiveEngine"}
    ).lasgd_overlap


@pytest.mark.parametrize(
    "tau,fragments,overlap",
    [
        (4, 1, True),  # the default period
        (LASGD_OVERLAP_MAX_DELAY, 1, True),
        (LASGD_OVERLAP_MAX_DELAY + 1, 1, False),
        (4 * LASGD_OVERLAP_MAX_DELAY, 4, True),  # each fragment lands tau / 4 steps late
        (4 * LASGD_OVERLAP_MAX_DELAY + 4, 4, False),
    ],
)
def test_unset_lasgd_overlap_overlaps_averages_that_land_at_most_the_rule_s_steps_late(
    tau, fragments, overlap
):
    settings = {"MXKV_MODE": "lasgd", "MXKV_TAU": str(tau), "MXKV_FRAGMENTS": str(fragments)}
    config = Config.from_environment(settings)
    assert (config.lasgd_overlap, config.lasgd_overlap_by_rule) == (overlap, True)
    for chosen in (True, False):  # a value set is kept, whatever the period
        settings["MXKV_LASGD_OVERLAP"] = str(int(chosen))
        config = Config.from_environment(settings)
        assert (config.lasgd_overlap, config.lasgd_overlap_by_rule) == (chosen, False)


def test_a_checkpoint_written_with_other_averaging_settings_is_refused():
    with pytest.raises(
        MXKVError,
        match="lasgd: this checkpoint was written without an outer "
        "optimizer \\(MXKV_OUTER\\); resume with the same",
    ):
        check_saved_with({"outer": None}, "outer", True, "lasgd", "an outer optimizer (MXKV_OUTER)")
    with pytest.raises(MXKVError, match="written with 16-bit averages"):
        check_saved_with(
            {"deltas": {"residual": {}}},
            "deltas",
            False,
            "lasgd",
            "16-bit averages (MXKV_COMPRESS)",
        )
    check_saved_with({}, "deltas", False, "lasgd", "16-bit averages")  # older: none saved


def test_the_averages_take_the_ring_under_auto_and_an_algorithm_named():
    auto = Config.from_environment({"MXKV_MODE": "lasgd"})
    assert averages_config(auto).algorithm == "ring"
    rd = Config.from_environment({"MXKV_MODE": "lasgd", "MXKV_ALGO": "rd"})
    assert averages_config(rd).algorithm == "rd"
