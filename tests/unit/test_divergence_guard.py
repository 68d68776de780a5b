"""Rank 0's divergence guard (mxkv_hybrid/safety/divergence_guard.py), fed losses as the
backward hooks feed it: it speaks once, naming the knob of the job's mode, when a loss
that had fallen below half its start climbs back near it, or turns NaN; never for a loss
that falls or one that never fell."""

import logging
import math

import mxnet as mx
import pytest

from mxkv_hybrid import Config, DivergenceError
from mxkv_hybrid.safety import divergence_guard
from mxkv_hybrid.safety.divergence_guard import WINDOW, DivergenceGuard

LASGD_OUTER = {"MXKV_MODE": "lasgd", "MXKV_OUTER": "nesterov"}


def feed(guard: DivergenceGuard, losses) -> None:
    """Each loss as the head of one backward (a batch of two samples with that mean)."""
    for loss in losses:
        guard.record([mx.nd.array([loss, loss])])
    guard.record([mx.nd.array([0.0, 0.0])])  # reads the last one


def windows(*medians: float) -> list:
    return [m for m in medians for _ in range(WINDOW)]


def guard_of(environment: dict) -> DivergenceGuard:
    return DivergenceGuard(Config.from_environment(environment))


def warnings_in(caplog) -> list:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]


def test_a_loss_that_falls_or_never_fell_raises_nothing(caplog):
    for losses in (windows(2.3, 1.5, 0.8, 0.9, 0.4, 0.6), windows(2.3, 2.2, 2.4, 2.3, 2.5)):
        guard = guard_of(LASGD_OUTER)
        feed(guard, losses)
        assert not guard.warned
    assert warnings_in(caplog) == []


def test_a_loss_back_near_its_start_warns_once_naming_the_mode_s_knob(caplog):
    guard = guard_of(LASGD_OUTER)
    feed(guard, windows(2.3, 1.0, 2.0, 2.2, 2.5))  # 2.0 is 0.87 of the start: not yet
    assert guard.warned
    (message,) = warnings_in(caplog)
    assert "fell to 1 and is back at 2.2" in message
    assert "lower MXKV_OUTER_MOMENTUM (now the rule's) or MXKV_OUTER_LR (now 0.7)" in message
    assert "The run goes on" in message


def test_a_non_finite_loss_warns_and_with_fail_on_divergence_raises(caplog):
    feed(guard_of({"MXKV_MODE": "async", "MXKV_ASYNC_DAMPING": "none"}), [2.3, math.nan])
    (message,) = warnings_in(caplog)
    assert "loss is nan" in message and "set MXKV_ASYNC_DAMPING=rate" in message
    strict = guard_of({"MXKV_MODE": "lasgd", "MXKV_FAIL_ON_DIVERGENCE": "1"})
    with pytest.raises(
        DivergenceError, match=r"lower MXKV_TAU \(now 4\) or MXKV_LOCAL_LR_SCALE \(now the rule's\)"
    ):
        feed(strict, windows(2.3, 0.5, 2.3))


def test_only_the_newest_open_store_s_guard_is_fed():
    first, second = guard_of(LASGD_OUTER), guard_of(LASGD_OUTER)
    divergence_guard.watch_with(first)
    divergence_guard.watch_with(second)
    divergence_guard.stop_watching(first)  # an older store closing leaves the newer's
    divergence_guard.record_heads(mx.nd.array([1.0]))
    assert second._backwards == 1 and first._backwards == 0
    divergence_guard.stop_watching(second)
    divergence_guard.record_heads([mx.nd.array([1.0])])
    assert second._backwards == 1
