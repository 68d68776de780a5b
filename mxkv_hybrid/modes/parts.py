"""What the store (kvstore.Hybrid) is made of in each MXKV_MODE: the one place that builds
a mode's objects by its name."""

from dataclasses import dataclass
from typing import Callable, Dict, Optional, Sequence, Union

from ..comm.collectives import TensorCollectives
from ..comm.topology import Groups, World
from ..config import Config
from .averaging import Averaging, Reducer
from .elastic import ElasticAveraging
from .grouped_sync import GroupedSync
from .local_sgd import LocalSGD
from .server_weights import ServerWeights
from .worker_weights import Share, WorkerWeights


@dataclass
class ModeParts:
    """reducer: what combines plain values; weights: what keeps the weights; averaging:
    the averaging schedule (easgd, lasgd); rejoinable: what knows a restarted group's steps
    (async, easgd); share: how a broadcast reaches the other groups (separate sync group
    jobs); staleness: the servers' staleness for the step summary (async)."""

    reducer: Reducer
    weights: Union[WorkerWeights, ServerWeights]
    averaging: Optional[Averaging] = None
    rejoinable: Optional[Union[ElasticAveraging, ServerWeights]] = None
    share: Optional[Share] = None
    staleness: Optional[Callable[[], Sequence[int]]] = None


Builder = Callable[[Config, World, Groups, TensorCollectives], ModeParts]


def _allreduce(
    config: Config, world: World, this_group: Groups, collectives: TensorCollectives
) -> ModeParts:
    return ModeParts(collectives, WorkerWeights(collectives, collectives))


def _sync(
    config: Config, world: World, this_group: Groups, collectives: TensorCollectives
) -> ModeParts:
    """The weights stay on the workers until the servers take the optimizer (set_optimizer)."""
    grouped = GroupedSync(config, world, this_group)
    share = None if world.spans_all_ranks else grouped.share_across_groups
    return ModeParts(grouped, WorkerWeights(collectives, grouped, share), share=share)


def _async(
    config: Config, world: World, this_group: Groups, collectives: TensorCollectives
) -> ModeParts:
    servers = ServerWeights(config, world, this_group, collectives)
    return ModeParts(collectives, servers, rejoinable=servers, staleness=lambda: servers.staleness)


def _easgd(
    config: Config, world: World, this_group: Groups, collectives: TensorCollectives
) -> ModeParts:
    elastic = ElasticAveraging(config, world, this_group)
    return ModeParts(
        elastic, WorkerWeights(collectives, elastic), averaging=elastic, rejoinable=elastic
    )


def _lasgd(
    config: Config, world: World, this_group: Groups, collectives: TensorCollectives
) -> ModeParts:
    local = LocalSGD(config, world)
    return ModeParts(local, WorkerWeights(collectives, local), averaging=local)


_BUILDERS: Dict[str, Builder] = {
    "allreduce": _allreduce,
    "sync": _sync,
    "async": _async,
    "easgd": _easgd,
    "lasgd": _lasgd,
}


def parts_for(
    config: Config, world: World, this_group: Groups, collectives: TensorCollectives
) -> ModeParts:
    """The objects of config.mode's store, over `collectives` (all ranks')."""
    return _BUILDERS[config.mode](config, world, this_group, collectives)
