"""The fused elastic step (comm/kernels.py) against numpy, in one process."""

import mxnet as mx
import numpy as np
import pytest

import mxkv_hybrid  # noqa: F401
from mxkv_hybrid.comm.kernels import elastic_step


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])  # float16: MXNet's operators
def test_the_elastic_step_moves_x_by_alpha_times_its_distance_to_the_centre(dtype):
    rng = np.random.default_rng(0)
    shapes = [(3, 4), (1,), (1000,)]
    x = [rng.normal(size=s).astype(dtype) for s in shapes]
    c = [rng.normal(size=s).astype(dtype) for s in shapes]
    weights = [mx.nd.array(a, dtype=dtype) for a in x]
    elastic = [mx.nd.zeros(s, dtype=dtype) for s in shapes]
    elastic_step(0.3, weights, [mx.nd.array(a, dtype=dtype) for a in c], elastic)
    tolerance = 1e-3 if dtype == "float16" else 1e-6
    for w, e, x0, c0 in zip(weights, elastic, x, c):
        want = 0.3 * (x0.astype(np.float64) - c0)
        np.testing.assert_allclose(e.asnumpy(), want, rtol=tolerance, atol=tolerance)
        np.testing.assert_allclose(w.asnumpy(), x0 - want, rtol=tolerance, atol=tolerance)
        assert w.dtype == np.dtype(dtype)
