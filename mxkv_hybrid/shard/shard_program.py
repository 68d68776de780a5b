"""One shard of one model as an MXNet symbol, and its three kinds of task on a device:
forward (its output for the next shard), the last shard's forward, loss, backward and
update, and an earlier shard's backward and update (its forward recomputed from the
stored input, then backward from the gradient the next shard sent back)."""
import os
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

import mxnet as mx

from .footprint import flatten_state
from .model_task import ModelTask
from .partition import Shard
from .spill_store import shard_arrays


@dataclass
class LoadedShard:
    """A shard's arrays on the device, keyed as the store keys them; the optimizer's state
    structure per trainable parameter (its arrays are among `arrays`)."""
    arrays: Dict[str, mx.nd.NDArray]
    states: Dict[int, object] = field(default_factory=dict)


class ShardProgram:
    def __init__(self, task: ModelTask, shard: Shard, ctx: mx.Context):
        # every task binds its shard anew: without this MXNet logs each bind's subgraph
        os.environ.setdefault("MXNET_SUBGRAPH_VERBOSE", "0")
        self.shard, self.ctx = shard, ctx
        out = mx.sym.var("data")
        for layer in task.layers()[shard.first:shard.stop]:
            out = layer(out)
        if shard.last:
            out = task.loss(out, mx.sym.var("label"))
        self.symbol = out
        self.trainable = [(name, index) for f in shard.layers
                          for (name, _), index in zip(f.trainable, f.indices)]
        self.aux = set(out.list_auxiliary_states())

    def allocate(self, optimizer, training: bool) -> LoadedShard:
        """Device arrays for the shard's parameters and fixed ones, and when `training` its
        optimizer state (as the optimizer creates it)."""
        arrays = {key: mx.nd.empty(shape, self.ctx) for key, shape in shard_arrays(self.shard)
                  if not key.startswith("state:")}
        loaded = LoadedShard(arrays)
        if training:
            for name, index in self.trainable:
                state = optimizer.create_state_multi_precision(index, arrays[f"param:{name}"])
                for k, array in enumerate(flatten_state(state)):
                    arrays[f"state:{name}:{k}"] = array
                loaded.states[index] = state
        return loaded

    def _bind(self, loaded: LoadedShard, data: mx.nd.NDArray, label: Optional[mx.nd.NDArray],
              gradients: Optional[Dict[str, mx.nd.NDArray]]):
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
        return self.symbol.bind(self.ctx, args, args_grad=gradients, grad_req=requests,
                                aux_states=aux)

    def forward(self, loaded: LoadedShard, data: mx.nd.NDArray) -> mx.nd.NDArray:
        """This shard's output for the batch (training mode: auxiliary states move)."""
        return self._bind(loaded, data, None, None).forward(is_train=True)[0]

    def train(self, loaded: LoadedShard, data: mx.nd.NDArray, label: Optional[mx.nd.NDArray],
              output_gradient: Optional[mx.nd.NDArray], updater,
              step: int) -> Tuple[Optional[mx.nd.NDArray], Optional[float]]:
        """Forward, backward (from the loss, or from `output_gradient`) and the optimizer's
        update of every trainable parameter as gluon.Trainer would make it at its `step`-th
        update. Returns the gradient of the input (None for the first shard) and, for the
        last shard, the batch's summed loss."""
        gradients = {name: mx.nd.zeros(loaded.arrays[f"param:{name}"].shape, self.ctx)
                     for name, _ in self.trainable}
        if self.shard.first > 0:
            gradients["data"] = mx.nd.zeros(data.shape, self.ctx)
        executor = self._bind(loaded, data, label, gradients)
        outputs = executor.forward(is_train=True)
        head = mx.nd.ones(outputs[0].shape, self.ctx) if self.shard.last else output_gradient
        executor.backward([head])
        loss = float(outputs[0].sum().asscalar()) if self.shard.last else None
        self._update(loaded, gradients, updater, step)
        return gradients.get("data"), loss

    def _update(self, loaded: LoadedShard, gradients: Dict[str, mx.nd.NDArray], updater,
                step: int) -> None:
        optimizer = updater.optimizer
        indices: List[int] = [index for _, index in self.trainable]
        for index in indices:  # the update counts the Trainer's optimizer would have
            optimizer._index_update_count[index] = step
            updater.states[index] = loaded.states[index]
            updater.states_synced[index] = True
        optimizer.num_update = step
        if indices:
            updater(indices, [gradients[name] for name, _ in self.trainable],
                    [loaded.arrays[f"param:{name}"] for name, _ in self.trainable])
