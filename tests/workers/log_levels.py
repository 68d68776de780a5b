"""Under mxkv-launch --auto: names the store 'local' (rank 0 logs, at info, that --auto
makes it 'hybrid'), logs a warning on the package's logger, then sums rank+1 from every
rank and prints the average with who it is."""

import logging

import mxnet as mx

kv = mx.kv.create("local")
logging.getLogger("mxkv_hybrid.workers").warning(f"mxkv_hybrid: rank {kv.rank} warns")
value = mx.nd.ones((3,)) * (kv.rank + 1)
kv.pushpull_gradients(0, value)
print(
    f"RESULT {type(kv).__name__} rank={kv.rank} of {kv.num_workers} "
    f"value={value.asnumpy().tolist()}"
)
