"""Rank 1 calls a collective with a different shape, dtype or key than the others."""

import sys

import mxnet as mx

case = sys.argv[1]
kv = mx.kv.create("hybrid")
odd = kv.rank == 1
shape = (4, 3) if odd and case == "shape" else (3, 4)
dtype = "float64" if odd and case == "dtype" else "float32"
key = "other" if odd and case == "key" else "weight"
kv.pushpull(["bias", key], [mx.nd.ones((5,)), mx.nd.ones(shape, dtype=dtype)])
print("no error was raised", flush=True)
