"""mxkv_hybrid: a KVStore plugin for Apache MXNet 1.9.1.

`import mxkv_hybrid` registers the store `hybrid` (class Hybrid) and installs the
Trainer/Module hooks; then `gluon.Trainer(..., kvstore='hybrid')`,
`Module.fit(kvstore='hybrid')` and `mx.kv.create('hybrid')` train data-parallel
over the MPI ranks this process was started with (see docs/). With
MXKV_AUTO=1 (`mxkv-launch --auto`) scripts with no kvstore flag are made
data-parallel too (integration/auto.py).

The folders are layers, each importing only from those below it: launch/, integration/,
the store (kvstore.py), modes/ and observe/, ps/, safety/, comm/ (with the C++ in _C), and
config.py / errors.py at the bottom; docs/ARCHITECTURE.md follows one step through them.
"""

import os as _os
import sys as _sys

from .logs import configure as _configure_logs

__version__ = "0.1.0"


# what `python -m` runs in the launcher's processes: mxkv-launch, and a host's relay
_LAUNCHER_MODULES = ("mxkv_hybrid.launch", "mxkv_hybrid.launch.relay")


def _is_the_launchers_process() -> bool:
    """True in mxkv-launch's own process (its console script, or `python -m
    mxkv_hybrid.launch`) and in a relay it starts: they start, watch or carry and never
    train, so they do not load MXNet (2 s of CPU before every job starts) nor act as a rank
    (a rank's link keeper); its ranks and servers do."""
    if _os.path.basename(_sys.argv[0] if _sys.argv else "") == "mxkv-launch":
        return True
    argv = getattr(_sys, "orig_argv", [])
    return (
        "-m" in argv
        and argv.index("-m") + 1 < len(argv)
        and argv[argv.index("-m") + 1] in _LAUNCHER_MODULES
    )


# every process's messages, the launcher's too (logs.py, MXKV_LOG_LEVEL)
_configure_logs(is_rank=not _is_the_launchers_process())
if not _is_the_launchers_process():
    from .comm.network import announce_own_address
    from .launch.control.keeper import start_for_this_rank
    from .mxnet_version import require_mxnet

    announce_own_address()  # before MXNet's import, where a parameter-server process starts
    start_for_this_rank()  # a rank of mxkv-launch: its link's keeper, before MPI_Init
    require_mxnet()  # before anything imports mxnet: a clear error without MXNet 1.9.x

    from .comm.topology import World, world  # after the check above
    from .config import KNOBS, Config, read_knob
    from .errors import ConfigError, MismatchError, MXKVError, NonFiniteError, ServerKeyConflict
    from .integration import auto, hooks
    from .integration.even_batches import EvenBatchesIter, even_batches
    from .integration.gpus import rank_gpus
    from .integration.hooks import consensus, steps_done
    from .integration.shard_sampler import ShardSampler
    from .kvstore import Hybrid
    from .modes.averagers import PeriodicModelAverager, broadcast_parameters
    from .safety import checkpoint

    __all__ = [
        "Hybrid",
        "Config",
        "KNOBS",
        "MXKVError",
        "ConfigError",
        "MismatchError",
        "NonFiniteError",
        "ServerKeyConflict",
        "World",
        "world",
        "consensus",
        "steps_done",
        "checkpoint",
        "PeriodicModelAverager",
        "broadcast_parameters",
        "even_batches",
        "EvenBatchesIter",
        "ShardSampler",
        "rank_gpus",
    ]

    hooks.install()
    if read_knob("MXKV_AUTO"):
        auto.install()
