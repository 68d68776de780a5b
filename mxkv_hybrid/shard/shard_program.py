"""One shard of one model as an MXNet symbol, and its three kinds of task on a device:
forward (its output for the next shard), the last shard's forward, loss, backward and
update, and an earlier shard's backward and update (its forward recomputed from the
stored input, then backward from the gradient the next shard sent back)."""

import os
from dataclasses import dataclass, field
from itertools import count
from typing import Dict, List, Optional, Tuple

import mxnet as mx

from .device_budget import DeviceBudget
from .model_task import ModelTask
from .partition import Shard
from .spill_store import shard_arrays


@dataclass
class LoadedShard:
    """A shard's arrays on the device, keyed as the store keys them; the optimizer's state
    structure per trainable parameter (its arrays are among `arrays`)."""

    arrays: Dict[str, mx.nd.NDArray]
    states: Dict[int, object] = field(default_factory=dict)


class ExecutorMemory:
    """The last executor bound on a rank: the next one binds into its memory (tasks run one
    at a time), so a task does not pay for fresh memory."""

    def __init__(self):
        self.last = None


class ShardProgram:
    def __init__(self, task: ModelTask, shard: Shard, ctx: mx.Context, memory: ExecutorMemory):
        # every task binds its shard anew: without this MXNet logs each bind's subgraph
        os.environ.setdefault("MXNET_SUBGRAPH_VERBOSE", "0")
        self.shard, self.ctx, self._memory = shard, ctx, memory
        out = mx.sym.var("data")
        for layer in task.layers()[shard.first : shard.stop]:
            out = layer(out)
        if shard.last:
            out = task.loss(out, mx.sym.var("label"))
        self.symbol = out
        self.trainable = [
            (name, index) for f in shard.layers for (name, _), index in zip(f.trainable, f.indices)
        ]
        self.aux = set(out.list_auxiliary_states())
        self._templates: Dict[int, object] = {}  # index -> the optimizer state's nesting

    def allocate(self, budget: DeviceBudget, optimizer, training: bool) -> LoadedShard:
        """Device arrays (from the budget's) for the shard's parameters and fixed ones, and
        when `training` for its optimizer state, nested as the optimizer nests it."""
        arrays = {
            key: budget.take(shape)
            for key, shape in shard_arrays(self.shard)
            if training or not key.startswith("state:")
        }
        loaded = LoadedShard(arrays)
        if training:
            for name, index in self.trainable:
                if index not in self._templates:
                    weight = arrays[f"param:{name}"]
                    self._templates[index] = _nesting(
                        optimizer.create_state_multi_precision(index, weight), count()
                    )
                flat = [a for k, a in arrays.items() if k.startswith(f"state:{name}:")]
                loaded.states[index] = _nested(self._templates[index], flat)
        return loaded

    def _bind(
        self,
        loaded: LoadedShard,
        data: mx.nd.NDArray,
        label: Optional[mx.nd.NDArray],
        gradients: Optional[Dict[str, mx.nd.NDArray]],
    ):
        args, aux = {"data": data}, {}
        if label is not None:
            args["label"] = label
        for key, array in loaded.arrays.items():
            kind, name = key.split(":")[:2]
            if kind == "param" or (kind == "fixed" and name not in self.aux):
                args[name] = array
            elif kind == "fixed":
                aux[name] = array
        requests = {name: ("write" if gradients and name in gradients else "null") for name in args}
        executor = self.symbol.bind(
            self.ctx,
            args,
            args_grad=gradients,
            grad_req=requests,
            aux_states=aux,
            shared_exec=self._memory.last,
        )
        self._memory.last = executor
        return executor

    def forward(self, loaded: LoadedShard, data: mx.nd.NDArray) -> mx.nd.NDArray:
        """This shard's output for the batch (training mode: auxiliary states move)."""
        return self._bind(loaded, data, None, None).forward(is_train=True)[0]

    def train(
        self,
        loaded: LoadedShard,
        data: mx.nd.NDArray,
        label: Optional[mx.nd.NDArray],
        output_gradient: Optional[mx.nd.NDArray],
        updater,
        step: int,
        budget: DeviceBudget,
    ) -> Tuple[Dict[str, mx.nd.NDArray], Optional[mx.nd.NDArray]]:
        """Forward, backward (from the loss, or from `output_gradient`) and the optimizer's
        update of every trainable parameter as gluon.Trainer would make it at its `step`-th
        update, pushed to MXNet's engine (not waited for). Returns the gradient arrays
        (from the budget's; "data": the input's, except for the first shard) and, for the
        last shard, the batch's summed loss."""
        gradients = {
            name: budget.take(loaded.arrays[f"param:{name}"].shape) for name, _ in self.trainable
        }
        if self.shard.first > 0:
            gradients["data"] = budget.take(data.shape)
        executor = self._bind(loaded, data, label, gradients)
        outputs = executor.forward(is_train=True)
        head = mx.nd.ones(outputs[0].shape, self.ctx) if self.shard.last else output_gradient
        executor.backward([head])
        loss = outputs[0].sum() if self.shard.last else None
        self._update(loaded, gradients, updater, step)
        return gradients, loss

    def _update(
        self, loaded: LoadedShard, gradients: Dict[str, mx.nd.NDArray], updater, step: int
    ) -> None:
        optimizer = updater.optimizer
        indices: List[int] = [index for _, index in self.trainable]
        for index in indices:  # the update counts the Trainer's optimizer would have
            optimizer._index_update_count[index] = step
            updater.states[index] = loaded.states[index]
            updater.states_synced[index] = True
        optimizer.num_update = step
        if indices:
            updater(
                indices,
                [gradients[name] for name, _ in self.trainable],
                [loaded.arrays[f"param:{name}"] for name, _ in self.trainable],
            )


def _nesting(state, counter):
    """A state's structure with its arrays numbered in flatten_state's order."""
    if state is None:
        return None
    if isinstance(state, (tuple, list)):
        return tuple(_nesting(part, counter) for part in state)
    return next(counter)


def _nested(nesting, arrays: List[mx.nd.NDArray]):
    """The state of that structure made of `arrays`."""
    if nesting is None:
        return None
    if isinstance(nesting, tuple):
        return tuple(_nested(part, arrays) for part in nesting)
    return arrays[nesting]
