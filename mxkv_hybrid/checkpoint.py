"""Checkpoints of a Gluon training run that resume on the same trajectory.

In the averaging modes (easgd, lasgd) every group or rank has its own weights and
optimizer state, so each rank writes its own files; the store's averaging state (step
counter, centre variable or average in flight) goes next to the optimizer states
(Trainer.save_states writes it, see hooks.AVERAGING_SUFFIX). Rank 0 writes a manifest
that `load` checks against the job it resumes in."""
import json
import os

from mxnet import gluon

from .errors import MXKVError
from .topology import world

MANIFEST = "manifest.json"


def _files(directory: str, rank: int):
    return (os.path.join(directory, f"rank{rank}.params"),
            os.path.join(directory, f"rank{rank}.states"))


def _mode(trainer: gluon.Trainer):
    """The MXKV_MODE of the Trainer's hybrid store (None for other stores)."""
    store = trainer._kvstore or (trainer._kvstore_params or {}).get("kvstore")
    config = getattr(store, "config", None)
    return config.mode if config is not None else None


def save(directory: str, net: gluon.Block, trainer: gluon.Trainer) -> None:
    """Collective: every rank writes its weights and trainer state into `directory`."""
    this = world()
    os.makedirs(directory, exist_ok=True)
    params, states = _files(directory, this.rank)
    net.save_parameters(params)
    trainer.save_states(states)
    if this.rank == 0:
        manifest = {"ranks": this.size, "mode": _mode(trainer)}
        with open(os.path.join(directory, MANIFEST), "w") as f:
            json.dump(manifest, f)
    this.comm.Barrier()


def load(directory: str, net: gluon.Block, trainer: gluon.Trainer) -> None:
    """Collective: every rank reads back what `save` wrote for it. The network must be
    initialised (shapes known: in_units, or one forward pass) and the Trainer created."""
    this = world()
    path = os.path.join(directory, MANIFEST)
    if not os.path.exists(path):
        raise MXKVError(f"{path} is missing: {directory} is not a checkpoint written by "
                        "mxkv_hybrid.checkpoint.save")
    with open(path) as f:
        manifest = json.load(f)
    mode = _mode(trainer)
    if manifest["ranks"] != this.size or manifest["mode"] != mode:
        raise MXKVError(f"{directory} was saved by {manifest['ranks']} ranks in mode "
                        f"{manifest['mode']}, and this job has {this.size} ranks in mode {mode}: "
                        "resume with the same number of ranks and MXKV_MODE")
    deferred = [p.name for p in net.collect_params().values() if p._deferred_init]
    if deferred:
        raise MXKVError(f"load: parameters {deferred} are not initialised yet (deferred "
                        "shapes): run one forward pass or give in_units/in_channels first, "
                        "or rank 0's weights would replace every rank's")
    params, states = _files(directory, this.rank)
    # States first: the Trainer's first use broadcasts rank 0's weights (MXNet's
    # _init_params), which must not replace the per-rank weights loaded next.
    trainer.load_states(states)
    net.load_parameters(params, ctx=next(iter(net.collect_params().values())).list_ctx())
