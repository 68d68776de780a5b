"""Each rank contributes rank+1 as a gradient; prints the averaged result (the Trainer's
path, MXKV_AVERAGE=1) and who it is."""

import mxnet as mx

kv = mx.kv.create("hybrid")
value = mx.nd.ones((3,)) * (kv.rank + 1)
kv.pushpull_gradients(0, value)
print(
    f"RESULT {type(kv).__name__} rank={kv.rank} of {kv.num_workers} "
    f"value={value.asnumpy().tolist()}"
)
