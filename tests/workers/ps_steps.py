"""Runs pushpull steps until told otherwise; rank 0 writes the step count to PROGRESS
(a file) so that a test can act mid-training. argv: PROGRESS STEPS"""

import sys
import time

import mxnet as mx

from mxkv_hybrid.atomic_file import write_atomically

progress, steps = sys.argv[1], int(sys.argv[2])
kv = mx.kv.create("hybrid")
grads = [mx.nd.ones((1000,)) * (kv.rank + 1) for _ in range(4)]
for step in range(steps):
    kv.pushpull(list(range(4)), grads)
    if kv.rank == 0:  # atomically: the test reads it while this rank trains
        write_atomically(progress, str(step + 1).encode())
    time.sleep(0.05)
print(f"finished {steps} steps", flush=True)
