"""Failure rehearsals for the launcher: `raise` (rank 1 raises while the others wait in a
collective) or `hang` (rank 1 never joins the collective)."""
import sys
import time

import mxnet as mx

kv = mx.kv.create("hybrid")
if kv.rank == 1:
    if sys.argv[1] == "raise":
        raise RuntimeError("rank 1 fails on purpose")
    time.sleep(3600)
kv.pushpull(0, mx.nd.ones((3,)))
