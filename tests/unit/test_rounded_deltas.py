"""modes/rounded_deltas.py: rounding to 16 bits as the wire does, and error feedback."""

import mxnet as mx
import numpy as np

from mxkv_hybrid.modes.rounded_deltas import RoundedDeltas, round_to_16_bits


def test_bfloat16_rounds_to_nearest_even_and_keeps_nan():
    values = np.array([1 + 2**-8, 1 + 3 * 2**-8, 1 + 2**-7, -3.0, np.inf, np.nan], dtype=np.float32)
    rounded = round_to_16_bits(values, "bf16")
    np.testing.assert_array_equal(rounded[:5], [1.0, 1 + 2**-6, 1 + 2**-7, -3.0, np.inf])
    assert np.isnan(rounded[5]) and rounded.dtype == np.float32


def test_float16_is_numpy_s_half():
    values = np.array([0.1, 100.03, -2.5e-5], dtype=np.float32)
    np.testing.assert_array_equal(
        round_to_16_bits(values, "fp16"), values.astype(np.float16).astype(np.float32)
    )


def test_error_feedback_sends_in_all_what_the_changes_add_up_to():
    """The same small change sent 64 times: the sum of what went out (rounded) equals 64
    times the change to one rounding of the total, where rounding each alone loses more."""
    deltas = RoundedDeltas("bf16")
    anchor, model = mx.nd.array([1000.0, 1.0]), mx.nd.array([1000.0 - 0.1234, 1.0 - 0.001])
    out = mx.nd.zeros((2,))
    sent = np.zeros(2)
    for _ in range(64):
        deltas.changes(["w"], [anchor], [model], [out])
        sent += round_to_16_bits(out.asnumpy(), "bf16")
    change = (anchor - model).asnumpy().astype(np.float64)
    carried = np.abs(sent - 64 * change)
    alone = np.abs(64 * round_to_16_bits(change.astype(np.float32), "bf16") - 64 * change)
    assert (carried <= np.abs(change) * 2**-8 + 1e-6).all(), carried
    assert (alone > carried).all(), (alone, carried)


def test_the_mean_change_becomes_the_mean_model():
    anchor, mean = mx.nd.array([5.0, -1.0]), mx.nd.array([0.5, 0.25])
    RoundedDeltas.models([anchor], [mean])
    np.testing.assert_array_equal(mean.asnumpy(), [4.5, -1.25])
