"""mxkv_hybrid: a KVStore plugin for Apache MXNet 1.9.1.

`import mxkv_hybrid` registers the store `hybrid` (class Hybrid) and installs the
Trainer/Module hooks; then `gluon.Trainer(..., kvstore='hybrid')`,
`Module.fit(kvstore='hybrid')` and `mx.kv.create('hybrid')` train data-parallel
over the MPI ranks this process was started with (see README.md). With
MXKV_AUTO=1 (`mxkv-launch --auto`) scripts with no kvstore flag are made
data-parallel too (module auto).
"""
from . import auto, checkpoint, hooks
from .averagers import PeriodicModelAverager, broadcast_parameters
from .config import KNOBS, Config, read_knob
from .errors import ConfigError, MismatchError, MXKVError, NonFiniteError, ServerKeyConflict
from .even_batches import EvenBatchesIter, even_batches
from .hooks import consensus
from .kvstore import Hybrid
from .shard_sampler import ShardSampler
from .topology import World, world

__all__ = ["Hybrid", "Config", "KNOBS", "MXKVError", "ConfigError", "MismatchError", "NonFiniteError",
           "ServerKeyConflict",
           "World",
           "world", "consensus", "checkpoint", "PeriodicModelAverager", "broadcast_parameters",
           "even_batches", "EvenBatchesIter", "ShardSampler"]
__version__ = "0.1.0"

hooks.install()
if read_knob("MXKV_AUTO"):
    auto.install()
