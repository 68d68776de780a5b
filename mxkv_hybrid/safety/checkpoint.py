"""Checkpoints of a Gluon training run that resume on the same trajectory.

In the averaging modes (easgd, lasgd) every group or rank has its own weights and
optimizer state, so each rank writes its own files; the store's averaging state (step
counter, centre variable or average in flight) goes next to the optimizer states
(Trainer.save_states writes it, see hooks.AVERAGING_SUFFIX).

A save is committed by its manifest: every rank writes files of a new generation
(rank<r>.g<n>.*), all ranks meet, and only then rank 0 replaces the manifest atomically
with one naming generation n; the files of other generations are removed after that.
A job that dies during a save (or a save that fails) leaves the manifest naming the
previous generation, whose files are untouched, so the last checkpoint stays valid even
when a directory is saved over. `load` checks the manifest against the job it resumes in;
`load_latest` resumes only when there is a checkpoint (what a script restarted by
`mxkv-launch --restarts` calls), and both return the progress `save` was given.

Only rank 0 reads and writes the manifest, and each rank reads and writes only its own
files, so `directory` may be a disk local to each host (the ranks of a host share it, and
rank 0's host holds the manifest) as well as a shared file system.

When each group runs as its own MPI job (mode easgd's default layout under mxkv-launch)
the groups live and die apart, and so do their checkpoints: each group commits its own
manifest (manifest.group<g>.json, written by the group's leader) over its own ranks' files,
and a restarted group resumes from its own. The centre variable stays on the servers,
which outlive a lost group; only a job started afresh (MXKV_ATTEMPT=0: new servers) sets
it back to the one group 0 saved. In mode sync the groups would have to commit together,
which only one MPI job does: checkpoints are refused there."""

import glob
import json
import logging
import os
from typing import Optional, Union

import mxnet as mx
from mxnet import gluon

from ..atomic_file import write_atomically
from ..capabilities import capabilities_of, modes_with
from ..comm import stall
from ..comm.topology import World, world
from ..errors import ConfigError, MXKVError
from ..logs import TO_STDERR

log = logging.getLogger(__name__)
MANIFEST = "manifest.json"  # one MPI job; separate group jobs: manifest.group<g>.json


def _stem(rank: int, generation: Union[int, str]) -> str:
    """What the names of a rank's files of one generation start with ("*": of any)."""
    return f"rank{rank}.g{generation}"


def _files(directory: str, rank: int, generation: int):
    prefix = os.path.join(directory, _stem(rank, generation))
    return prefix + ".params", prefix + ".states"


def _manifest_name(this: World) -> str:
    """The manifest this job (or, separate group jobs: this group) commits."""
    job = this.group_job
    return MANIFEST if job is None else f"manifest.group{job.group}.json"


def _read_manifest(directory: str, this: World):
    """The committed manifest of `directory` for this job or group, or None when there is
    none; refuses a directory that a job of the other layout saved."""
    path = os.path.join(directory, _manifest_name(this))
    if os.path.exists(path):
        with open(path) as f:
            return json.load(f)
    pattern = "manifest.group*.json" if this.group_job is None else MANIFEST
    other = glob.glob(os.path.join(glob.escape(directory), pattern))
    if other:
        saver, here = (
            ("separate group jobs", "one MPI job")
            if this.group_job is None
            else ("one MPI job", "separate group jobs")
        )
        raise ConfigError(
            f"{directory} was saved by {saver} ({os.path.basename(other[0])}), and "
            f"this job runs as {here}: resume in the layout it was saved in "
            "(mxkv-launch --group-jobs or --one-job)"
        )
    return None


def _mode(trainer: gluon.Trainer):
    """The MXKV_MODE of the Trainer's hybrid store (None for other stores)."""
    store = trainer._kvstore or (trainer._kvstore_params or {}).get("kvstore")
    config = getattr(store, "config", None)
    return config.mode if config is not None else None


def _scope(what: str, trainer: gluon.Trainer) -> World:
    """The ranks that commit one manifest: this MPI job (all ranks, or with separate group
    jobs this group's). Refused where the mode's row says no, before any file is written:
    a mode without checkpoints, and group jobs of a mode whose groups commit together."""
    this = world()
    mode = _mode(trainer)
    if mode is None:
        return this
    can = capabilities_of(mode)
    if not can.checkpoints:
        raise ConfigError(
            f"checkpoint.{what}: in MXKV_MODE={mode} the optimizer and its state live on "
            "the parameter servers, which outlive a lost group, and a restarted group goes "
            "on from their weights (Hybrid.steps_done): save the weights "
            "(net.save_parameters), or use a mode that keeps its optimizer state on the "
            f"ranks ({', '.join(modes_with('checkpoints'))})"
        )
    if not this.spans_all_ranks and not can.checkpoints_per_group:
        raise ConfigError(
            f"checkpoint.{what}: in MXKV_MODE={mode} every group must save and "
            "resume the same step, which only one MPI job commits together: start "
            "the job without --group-jobs / --join (one MPI job is the default "
            f"layout of mode {mode})"
        )
    return this


def _is_committer(this: World) -> bool:
    """Whether this rank reads and writes the manifest (the MPI job's rank 0)."""
    return this.comm.Get_rank() == 0


def _agreed_manifest(this: World, directory: str) -> Optional[dict]:
    """The committed manifest as the committing rank read it, on every rank of the MPI job
    (a layout it refused is raised on every rank)."""
    found = None
    if _is_committer(this):
        try:
            found = _read_manifest(directory, this)
        except ConfigError as err:
            found = err
    found = this.comm.bcast(found, root=0)
    if isinstance(found, ConfigError):
        raise found
    return found


def save(
    directory: str, net: gluon.Block, trainer: gluon.Trainer, progress: Optional[dict] = None
) -> None:
    """Collective: every rank writes its weights and trainer state into `directory`, as a
    new generation that the manifest commits once every rank has written it. `progress`
    (JSON, e.g. {"step": 16}) is kept in the manifest: `load` and `load_latest` return it."""
    this = _scope("save", trainer)
    try:
        json.dumps(progress)  # on every rank, before any of them writes
    except TypeError as err:
        raise MXKVError(
            f"checkpoint.save: progress must be JSON (numbers, strings, lists, dicts): {err}"
        ) from None
    os.makedirs(directory, exist_ok=True)
    committed = _agreed_manifest(this, directory)
    generation = committed["generation"] + 1 if committed else 1
    params, states = _files(directory, this.rank, generation)
    net.save_parameters(params)
    trainer.save_states(states)
    with stall.waiting("checkpoint save: the other ranks' files"):
        this.comm.Barrier()  # every rank's files are complete
    if _is_committer(this):
        manifest = {
            "ranks": this.size,
            "mode": _mode(trainer),
            "generation": generation,
            "progress": progress or {},
        }
        if this.group_job is not None:
            manifest.update(
                group=this.group_job.group,
                groups=this.group_job.groups,
                group_ranks=this.comm.Get_size(),
            )
        write_atomically(
            os.path.join(directory, _manifest_name(this)), json.dumps(manifest).encode()
        )
    with stall.waiting("checkpoint save: the manifest"):
        this.comm.Barrier()  # committed: the older generations can go
    keep = _stem(this.rank, generation) + "."  # also the states' .averaging file
    for path in glob.glob(os.path.join(glob.escape(directory), _stem(this.rank, "*"))):
        if not os.path.basename(path).startswith(keep):
            os.remove(path)


def load(directory: str, net: gluon.Block, trainer: gluon.Trainer) -> dict:
    """Collective: every rank reads back what `save` wrote for it; returns the progress
    saved with it ({} if none). The network must be initialised (shapes known: in_units,
    or one forward pass) and the Trainer created."""
    this = _scope("load", trainer)
    manifest = _agreed_manifest(this, directory)
    if manifest is None:
        raise MXKVError(
            f"{os.path.join(directory, _manifest_name(this))} is missing: {directory} "
            "is not a checkpoint written (to the end) by mxkv_hybrid.checkpoint.save"
        )
    return _restore(this, manifest, directory, net, trainer)


def load_latest(directory: str, net: gluon.Block, trainer: gluon.Trainer) -> Optional[dict]:
    """Collective: resumes from the checkpoint committed in `directory` and returns the
    progress saved with it; None, loading nothing, when there is none yet (a first start).
    A script that calls it before training goes on by itself after `mxkv-launch
    --restarts` started it again."""
    this = _scope("load_latest", trainer)
    manifest = _agreed_manifest(this, directory)
    return None if manifest is None else _restore(this, manifest, directory, net, trainer)


def _restore(
    this: World, manifest: dict, directory: str, net: gluon.Block, trainer: gluon.Trainer
) -> dict:
    mode = _mode(trainer)
    group_ranks = None if this.group_job is None else this.comm.Get_size()
    if (
        manifest["ranks"] != this.size
        or manifest["mode"] != mode
        or manifest.get("group_ranks") != group_ranks
    ):
        raise MXKVError(
            f"{directory} was saved by {manifest['ranks']} ranks in mode "
            f"{manifest['mode']}{_group_text(manifest.get('group_ranks'))}, and this "
            f"job has {this.size} ranks in mode {mode}{_group_text(group_ranks)}: "
            "resume with the same number of ranks (and groups) and MXKV_MODE"
        )
    deferred = [p.name for p in net.collect_params().values() if p._deferred_init]
    if deferred:
        raise MXKVError(
            f"load: parameters {deferred} are not initialised yet (deferred "
            "shapes): run one forward pass or give in_units/in_channels first, "
            "or rank 0's weights would replace every rank's"
        )
    params, states = _files(directory, this.rank, manifest["generation"])
    contexts = next(iter(net.collect_params().values())).list_ctx()
    if not trainer._kv_initialized:
        trainer._init_kvstore()  # decides update_on_kvstore; takes no weights yet
    if trainer._update_on_kvstore:
        # The store keeps the weights (modes allreduce and sync: the same on every rank):
        # they are loaded before it takes them, since MXNet refuses to reset a dist
        # store's weights (Trainer._reset_kvstore), and the states then go to its optimizer.
        net.load_parameters(params, ctx=contexts)
        trainer.load_states(states)
        _keep_own_untrained(net, params)
    else:
        # Each rank updates its own weights (modes easgd, lasgd): the store's start
        # (in load_states) broadcasts rank 0's weights, which the per-rank weights loaded
        # next replace.
        trainer.load_states(states)
        net.load_parameters(params, ctx=contexts)
    if _is_committer(this):
        whose = "" if this.group_job is None else f"group {this.group_job.group} "
        log.info(
            f"mxkv_hybrid: {whose}resumed from checkpoint {directory} (generation "
            f"{manifest['generation']}, progress {json.dumps(manifest.get('progress', {}))})",
            extra=TO_STDERR,
        )
    return manifest.get("progress", {})


def _group_text(group_ranks: Optional[int]) -> str:
    return "" if group_ranks is None else f", {group_ranks} in this group's MPI job"


def _keep_own_untrained(net: gluon.Block, params: str) -> None:
    """Parameters no optimizer updates (BatchNorm's running statistics) are this rank's
    own, and the store's start broadcast rank 0's: each rank copies its saved ones back
    (into the arrays: Parameter.set_data would reset the Trainer's store again)."""
    saved = mx.nd.load(params)
    for name, param in net._collect_params_with_prefix().items():
        if param.grad_req == "null" and name in saved:
            for array in param.list_data():
                array[:] = saved[name]
