"""mxkv_hybrid: a KVStore plugin for Apache MXNet 1.9.1.

`import mxkv_hybrid` registers the store `hybrid` (class Hybrid) and installs the
Trainer/Module hooks; then `gluon.Trainer(..., kvstore='hybrid')`,
`Module.fit(kvstore='hybrid')` and `mx.kv.create('hybrid')` train data-parallel
over the MPI ranks this process was started with (see docs/). With
MXKV_AUTO=1 (`mxkv-launch --auto`) scripts with no kvstore flag are made
data-parallel too (integration/auto.py).

The registration waits for MXNet: it runs at once when `mxnet` is already imported, and
otherwise the moment the process imports it (a post-import hook). A process that never
imports MXNet never loads it: mxkv-launch, its relays and the parameter-server
scheduler start in a fraction of a second. The names below (`Hybrid`, `world`, ...) load
the rank's side on first use.

The folders are layers, each importing only from those below it: launch/, integration/,
the store (kvstore.py), modes/ and observe/, ps/, safety/, comm/ (with the C++ in _C), and
the root's base modules at the bottom; docs/architecture/layers.md follows one step
through them.
"""

import importlib
from typing import Any, Dict

import wrapt

from .import_settle import watch, when_settled
from .launch.control.keeper import start_for_this_rank
from .logs import configure as _configure_logs
from .mxnet_version import require_mxnet, require_mxnet_installed
from .network import announce_own_address

__version__ = "0.1.0"

# every public name -> the module that defines it, loaded on first use
_EXPORTS: Dict[str, str] = {
    "Hybrid": "kvstore",
    "Config": "config",
    "KNOBS": "config",
    "MXKVError": "errors",
    "ConfigError": "errors",
    "MismatchError": "errors",
    "NonFiniteError": "errors",
    "DivergenceError": "errors",
    "ServerKeyConflict": "errors",
    "World": "comm.topology",
    "world": "comm.topology",
    "consensus": "integration.hooks",
    "steps_done": "integration.hooks",
    "checkpoint": "safety.checkpoint",
    "PeriodicModelAverager": "modes.averagers",
    "broadcast_parameters": "modes.averagers",
    "even_batches": "integration.even_batches",
    "EvenBatchesIter": "integration.even_batches",
    "ShardSampler": "integration.shard_sampler",
    "rank_gpus": "integration.gpus",
}
__all__ = list(_EXPORTS)


def __getattr__(name: str) -> Any:
    """A public name, from its module (PEP 562): the rank's side loads on first use."""
    if name not in _EXPORTS:
        raise AttributeError(f"module 'mxkv_hybrid' has no attribute {name!r}")
    module = importlib.import_module(f"{__name__}.{_EXPORTS[name]}")
    return module if name == "checkpoint" else getattr(module, name)


def _install() -> None:
    """Checks MXNet's version, registers the store and installs the Trainer/Module hooks
    (and MXKV_AUTO's changes)."""
    require_mxnet()
    from .config import read_knob
    from .integration import auto, hooks

    hooks.install()
    if read_knob("MXKV_AUTO"):
        auto.install()


# every process's messages, the launcher's too (logs.py, MXKV_LOG_LEVEL)
_configure_logs()
require_mxnet_installed()  # a clear error without MXNet, before anything else runs
announce_own_address()  # before MXNet's import, where a parameter-server process starts
start_for_this_rank()  # a rank of mxkv-launch: its link's keeper, before MPI_Init
watch(__name__)  # MXNet's first import may come from a module of ours, half executed:
wrapt.register_post_import_hook(lambda mxnet: when_settled(_install), "mxnet")  # then, after it
