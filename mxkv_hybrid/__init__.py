"""mxkv_hybrid: a KVStore plugin for Apache MXNet 1.9.1.

`import mxkv_hybrid` registers the store `hybrid` (class Hybrid) and installs the
Trainer/Module hooks; then `gluon.Trainer(..., kvstore='hybrid')`,
`Module.fit(kvstore='hybrid')` and `mx.kv.create('hybrid')` train data-parallel
over the MPI ranks this process was started with (see README.md).
"""
from . import checkpoint, hooks
from .averagers import PeriodicModelAverager, broadcast_parameters
from .config import KNOBS, Config
from .errors import ConfigError, MismatchError, MXKVError
from .hooks import consensus
from .kvstore import Hybrid
from .topology import World, world

__all__ = ["Hybrid", "Config", "KNOBS", "MXKVError", "ConfigError", "MismatchError", "World",
           "world", "consensus", "checkpoint", "PeriodicModelAverager", "broadcast_parameters"]
__version__ = "0.1.0"

hooks.install()
