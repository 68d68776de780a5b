"""`mxkv-launch --auto` (MXKV_AUTO=1): data-parallel training for scripts that have no
kvstore flag and read their whole data set on every process. Installed on import.

Exactly what changes (each change is logged once, by rank 0):
- the store names 'local' and 'device' become 'hybrid': the default of
  `gluon.Trainer(params, optimizer, optimizer_params)` ('device'), of `Module.fit`
  ('local') and `mx.kv.create('local' | 'device')`;
- `mx.io.ImageRecordIter(..., shuffle=True)` without num_parts/part_index reads
  the shard num_parts=world size, part_index=rank, and its epochs end on every rank
  at the same step (EvenBatchesIter);
- `gluon.data.DataLoader(..., shuffle=True)` without sampler/batch_sampler reads
  one shard per rank through a ShardSampler (a per-epoch permutation shared by all
  ranks, dealt out so every rank has the same number of samples).
- a script argument `--gpus LIST` (MXNet's image-classification scripts) becomes this
  rank's share of LIST (integration/gpus.py: one id per rank on the host picks the local
  rank's, one id gives each rank its own from it, a rank alone on its host keeps LIST).
Unshuffled readers (validation data) are left whole, so every rank evaluates all of it.
With one rank only the store changes.
"""

import logging
from typing import List, Set

import mxnet.gluon.data.dataloader
import mxnet.io
import mxnet.io.io

from ..comm.topology import world
from .even_batches import EvenBatchesIter
from .gpus import rank_gpus
from .patching import bind_call, patch
from .shard_sampler import ShardSampler

log = logging.getLogger(__name__)
DEFAULT_STORES = ("local", "device")
_installed = False
_logged: Set[str] = set()


def replaces_store(name: str) -> bool:
    """Whether --auto turns this store name into 'hybrid'."""
    return _installed and name.lower() in DEFAULT_STORES


def _log_once(message: str) -> None:
    if message not in _logged:
        _logged.add(message)
        if world().rank == 0:
            log.info(f"mxkv_hybrid --auto: {message}")


def store_name(name):
    """The store a script names: 'hybrid' where --auto replaces the name (logged once)."""
    if isinstance(name, str) and replaces_store(name):
        _log_once(f"kvstore '{name.lower()}' -> 'hybrid' ({world().size} ranks)")
        return "hybrid"
    return name


def _is_true(value) -> bool:
    return str(value).strip().lower() in ("1", "true")


def _image_record_iter(original, *args, **kwargs):
    sharded = (
        world().size > 1
        and _is_true(kwargs.get("shuffle", False))
        and "num_parts" not in kwargs
        and "part_index" not in kwargs
    )
    if not sharded:
        return original(*args, **kwargs)
    kwargs.update(num_parts=world().size, part_index=world().rank)
    _log_once(
        f"ImageRecordIter(shuffle=True, path_imgrec={kwargs.get('path_imgrec')!r}) reads "
        f"one of {world().size} shards per rank (num_parts={world().size}, part_index=rank); "
        "its epochs end on all ranks at the same step"
    )
    return EvenBatchesIter(original(*args, **kwargs))


def _data_loader_init(original, self, *args, **kwargs):
    call = bind_call(original, self, *args, **kwargs)
    given = call.arguments
    if (
        world().size > 1
        and given["shuffle"]
        and given["sampler"] is None
        and given["batch_sampler"] is None
    ):
        given["shuffle"] = False
        sampler = ShardSampler(len(given["dataset"]), world().rank, world().size)
        given["sampler"] = sampler
        _log_once(
            f"DataLoader(shuffle=True) over {len(given['dataset'])} samples reads a "
            f"shard of {len(sampler)} per rank (ShardSampler)"
        )
    original(*call.args, **call.kwargs)


def script_arguments(argv: List[str]) -> List[str]:
    """The script's arguments with `--gpus LIST` (or `--gpus=LIST`) made this rank's share
    (unchanged unless --auto is on)."""
    if not _installed:
        return argv
    argv = list(argv)
    for i, argument in enumerate(argv):
        if argument == "--gpus" and i + 1 < len(argv):
            argv[i + 1] = _rank_share(argv[i + 1])
            break
        if argument.startswith("--gpus="):
            argv[i] = "--gpus=" + _rank_share(argument[len("--gpus=") :])
            break
    return argv


def _rank_share(given: str) -> str:
    """This rank's share of a --gpus list (logged when it differs)."""
    mine = ",".join(map(str, rank_gpus(given)))
    if mine != given:
        here = world()
        log.info(
            f"mxkv_hybrid --auto: rank {here.rank} (local rank {here.local_rank} of "
            f"{here.local_size} on {here.host}): --gpus {given} -> --gpus {mine}"
        )
    return mine


def install() -> None:
    """Installs the --auto changes (idempotent)."""
    global _installed
    _installed = True  # mx.kv.create asks store_name (integration/hooks.py)
    for owner in (mxnet.io, mxnet.io.io):
        patch(owner, "ImageRecordIter", _image_record_iter)
    patch(mxnet.gluon.data.dataloader.DataLoader, "__init__", _data_loader_init)
    _log_once(
        "on: default stores become 'hybrid', shuffled training data is sharded by rank "
        "(see docs/guides/drop-in.md, 'Unmodified scripts')"
    )
