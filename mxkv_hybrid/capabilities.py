"""What each MXKV_MODE can do: the one table that config's checks, the launcher and the store
read instead of naming modes. Each field's doc is in its metadata (`dataclasses.fields`),
and the docs render it (docs/_ext/generated_reference.py)."""

from dataclasses import dataclass, field, fields
from typing import Any, Dict, Tuple

ALLREDUCE, SYNC, ASYNC, EASGD, LASGD = "allreduce", "sync", "async", "easgd", "lasgd"


def _can(doc: str) -> Any:
    """A capability: a yes/no field documented by `doc`."""
    return field(metadata={"doc": doc})


@dataclass(frozen=True)
class ModeCapabilities:
    """What one mode can do; every field is required, so no mode leaves one out."""

    servers: bool = _can(
        "The groups meet through MXNet's parameter servers (mxkv-launch --servers); easgd "
        "unless MXKV_TRANSPORT=rma."
    )
    group_jobs: bool = _can(
        "Each group can run as its own MPI job, the groups joined through the servers only "
        "(mxkv-launch --group-jobs, --serve and --join); easgd only asynchronous, over ps."
    )
    group_jobs_by_default: bool = _can(
        "With --servers and more than one group, each group runs as its own MPI job unless "
        "--one-job."
    )
    groups_step_together: bool = _can(
        "Every group takes every step with the others: a lost group stops them all, no group "
        "restarts alone (--restarts restarts the job), one MPI job commits a checkpoint."
    )
    easgd_sync: bool = _can("MXKV_EASGD_SYNC=1 makes the groups step together (synchronous EASGD).")
    rma_transport: bool = _can(
        "MXKV_TRANSPORT=rma: the centre variable in MPI windows of the group leaders, no servers."
    )
    gradients_allreduced: bool = _can(
        "Each step's gradients are summed by one allreduce over all ranks, hierarchical "
        "across groups with MXKV_HIERARCHY."
    )
    optimizer_on_servers: bool = _can(
        "set_optimizer sends the optimizer to the servers, which update the weights (sync: "
        "unless gradient compression keeps it on the ranks)."
    )
    updates_only_on_servers: bool = _can(
        "The servers hold the weights and apply every update: updates on the ranks are "
        "refused, and consensus reads the servers' weights."
    )
    outer_optimizer: bool = _can(
        "MXKV_OUTER: an outer optimizer on each averaged change (lasgd: DiLoCo) or elastic "
        "difference (easgd)."
    )
    fragments: bool = _can(
        "MXKV_FRAGMENTS: each average exchanges one fragment of the model (Streaming DiLoCo)."
    )
    overlapped_average: bool = _can(
        "MXKV_LASGD_OVERLAP: the model average runs behind the next local steps."
    )
    quantised_averages: bool = _can(
        "MXKV_COMPRESS=1bit: each model average sends every rank's change since the last "
        "shared model in 1-bit codes with error feedback."
    )
    async_damping: bool = _can("MXKV_ASYNC_DAMPING: the servers damp stale gradients.")
    local_steps: bool = _can(
        "Local steps: MXKV_TAU steps of each rank (lasgd) or group (easgd) between two "
        "averages or elastic exchanges."
    )
    local_lr_scale: bool = _can(
        "MXKV_LOCAL_LR_SCALE: the local steps take the gradients times a scale, by default a "
        "rule of MXKV_TAU and the number of local models (lasgd: ranks; easgd: groups)."
    )
    updates_on_store: bool = _can(
        "The store can run the optimizer (KVStore.is_capable(OPTIMIZER), update_on_kvstore), "
        "so it takes weights of stype row_sparse, which MXNet updates on the store; easgd and "
        "lasgd update each rank's (group's) own weights and refuse them, naming the fix."
    )
    compression_across_groups: bool = _can(
        "set_gradient_compression quantises what crosses between groups: allreduce each "
        "rank's sum (MXKV_HIERARCHY: each group's), sync each group's sum (the servers sum "
        "the codes), async each group's gradients (the servers decode them). easgd and lasgd "
        "quantise only the gradients summed in a group (lasgd: in the warm-up); the averaging "
        "stays float32."
    )
    checkpoints: bool = _can(
        "mxkv_hybrid.checkpoint.save and load: each rank saves its weights and optimizer "
        "state (sync: with update_on_kvstore=False). async keeps the optimizer state on the "
        "servers, which outlive a lost group: a restarted group goes on from them "
        "(Hybrid.steps_done)."
    )
    checkpoints_per_group: bool = _can(
        "Where each group runs as its own MPI job, each group commits its own checkpoint and "
        "a restarted group resumes from it; sync's groups must resume the same step, which "
        "only one MPI job commits."
    )


_NONE = dict.fromkeys((f.name for f in fields(ModeCapabilities)), False)

CAPABILITIES: Dict[str, ModeCapabilities] = {
    ALLREDUCE: ModeCapabilities(
        **dict(
            _NONE,
            groups_step_together=True,
            gradients_allreduced=True,
            updates_on_store=True,
            compression_across_groups=True,
            checkpoints=True,
        )
    ),
    SYNC: ModeCapabilities(
        **dict(
            _NONE,
            servers=True,
            group_jobs=True,
            groups_step_together=True,
            optimizer_on_servers=True,
            updates_on_store=True,
            compression_across_groups=True,
            checkpoints=True,
        )
    ),
    ASYNC: ModeCapabilities(
        **dict(
            _NONE,
            servers=True,
            group_jobs=True,
            group_jobs_by_default=True,
            optimizer_on_servers=True,
            updates_only_on_servers=True,
            async_damping=True,
            updates_on_store=True,
            compression_across_groups=True,
        )
    ),
    EASGD: ModeCapabilities(
        **dict(
            _NONE,
            servers=True,
            group_jobs=True,
            group_jobs_by_default=True,
            easgd_sync=True,
            rma_transport=True,
            outer_optimizer=True,
            local_steps=True,
            local_lr_scale=True,
            checkpoints=True,
            checkpoints_per_group=True,
        )
    ),
    LASGD: ModeCapabilities(
        **dict(
            _NONE,
            groups_step_together=True,
            outer_optimizer=True,
            fragments=True,
            overlapped_average=True,
            quantised_averages=True,
            local_steps=True,
            local_lr_scale=True,
            checkpoints=True,
        )
    ),
}
MODES: Tuple[str, ...] = tuple(CAPABILITIES)

# What mxkv-launch, which passes MXKV_MODE on unchecked, takes a mode it does not know for
# (its ranks refuse the value, naming the modes): one that may use the servers, no more.
UNKNOWN_MODE = ModeCapabilities(**dict(_NONE, servers=True))


def capabilities_of(mode: str) -> ModeCapabilities:
    """The row of `mode`; UNKNOWN_MODE for a name that is not a mode."""
    return CAPABILITIES.get(mode, UNKNOWN_MODE)


def modes_with(capability: str) -> Tuple[str, ...]:
    """The modes that have `capability` (a field of ModeCapabilities), in MODES' order."""
    return tuple(mode for mode, can in CAPABILITIES.items() if getattr(can, capability))


def modes_without(capability: str) -> Tuple[str, ...]:
    """The modes that lack `capability`, in MODES' order."""
    return tuple(mode for mode in MODES if mode not in modes_with(capability))


def steps_together(mode: str, easgd_sync: bool) -> bool:
    """Whether all ranks, not only a group's, take their steps together (MXKV_EASGD_SYNC
    the easgd_sync setting)."""
    can = capabilities_of(mode)
    return can.groups_step_together or (can.easgd_sync and easgd_sync)
