"""ShardOrchestrator: trains many models at once on the job's ranks, one device each, by
shard parallelism. Each rank, until every model is trained: claims the ready task of the
model with the longest remaining work (or the oldest ready one, `fifo`), loads the
shard's state and inputs from host memory into its device budget, runs the task, stores
the results back and marks the model's next task ready. While a task computes, the
previous task's results are stored and the next task, claimed ahead, is loaded, both in
the background (prefetch)."""

import logging
import time
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

import mxnet as mx
import numpy as np

from ..comm.topology import world
from ..errors import MXKVError
from .background import Background
from .device_budget import DeviceBudget
from .footprint import FLOAT, flatten_state, forward_bytes, measure
from .model_chain import ModelChain, Step
from .model_task import ModelTask
from .partition import partition
from .shard_program import ExecutorMemory, LoadedShard, ShardProgram
from .spill_store import SpillStore, shard_arrays
from .task_board import TaskBoard
from .utilisation import DeviceUse, Report

log = logging.getLogger(__name__)
SCHEDULES = ("lrtf", "fifo", "model-parallel")
IDLE_POLL_SECONDS = 1e-4


@dataclass
class Load:
    """A claimed task's arrays on the device, being filled from host memory."""

    step: Step
    shard: LoadedShard
    inputs: Dict[str, mx.nd.NDArray]  # "data", "label", "gradient" as the task needs
    reserved: int
    cached: bool
    owned: List[mx.nd.NDArray]  # taken from the budget's arrays, given back after
    filling: Background


@dataclass
class Finished:
    """A computed task whose results are being stored (then its model's next task is
    marked ready)."""

    load: Load
    storing: Background


class ShardOrchestrator:
    """`tasks` trained together; every rank of the job constructs it and calls run().

    device_memory_mb: what one rank may hold on its device (shards are cut to half of it
    when prefetching, so the next one loads beside the running one); schedule: "lrtf"
    (longest remaining work first), "fifo" (the task ready longest first) or
    "model-parallel" (one model at a time, shard s on rank s mod P, kept resident: the
    usual way to train a model too large for one device, for comparison); ctx: the
    device (default: GPU local_rank when MXNet sees GPUs, else the CPU)."""

    def __init__(
        self,
        tasks: Sequence[ModelTask],
        device_memory_mb: float,
        schedule: str = "lrtf",
        prefetch: bool = True,
        ctx: Optional[mx.Context] = None,
        progress: bool = True,
    ):
        if schedule not in SCHEDULES:
            raise MXKVError(f"schedule {schedule!r} is not one of {', '.join(SCHEDULES)}")
        if device_memory_mb <= 0:
            raise MXKVError(f"device_memory_mb must be positive, not {device_memory_mb}")
        if not tasks:
            raise MXKVError("no models to train")
        self._world = world()
        self._comm = self._world.comm
        self.rank, self.size = self._comm.Get_rank(), self._comm.Get_size()
        self.schedule, self.prefetch, self.progress = schedule, prefetch, progress
        self.ctx = ctx or (mx.gpu(self._world.local_rank) if mx.context.num_gpus() else mx.cpu())
        for k, task in enumerate(tasks):
            task.name = task.name or f"model{k}"
            task.check()
        self.tasks = list(tasks)
        footprints = [measure(task) for task in tasks]  # every rank: completes shapes
        self._check_same_models(footprints)
        footprints = self._comm.bcast(footprints if self.rank == 0 else None)  # rank 0's times
        self.budget = DeviceBudget(int(device_memory_mb * 2**20), self.ctx)
        limit = self.budget.limit // 2 if prefetch else self.budget.limit
        self.chains = [
            ModelChain(
                k, task, partition(task.name, footprints[k], limit, FLOAT * task.batches[0][1].size)
            )
            for k, task in enumerate(tasks)
        ]
        self.store = SpillStore(
            self._comm, [c.shards for c in self.chains], [t.epochs for t in tasks]
        )
        self.board = TaskBoard(self._comm, len(tasks))
        self._programs: Dict[Tuple[int, int], ShardProgram] = {}
        self._executors = ExecutorMemory()
        self._updaters = [self._updater(task) for task in tasks]
        self._cache: Dict[Tuple[int, int], Tuple[LoadedShard, int]] = {}  # model-parallel
        self._store_initial_state()

    # ---- set-up -------------------------------------------------------------------------
    def _check_same_models(self, footprints) -> None:
        """Every rank must describe the same models: names, epochs, batches and every
        layer's shapes, in the same order. Found on every rank together."""
        mine = [
            (
                task.name,
                task.epochs,
                len(task.batches),
                task.batch_size,
                [(f.trainable, f.fixed, f.input_shape, f.output_shape) for f in layers],
            )
            for task, layers in zip(self.tasks, footprints)
        ]
        described = self._comm.allgather(mine)
        for rank, theirs in enumerate(described):
            if theirs != described[0]:
                if len(theirs) != len(described[0]):
                    what = f"{len(theirs)} models against rank 0's {len(described[0])}"
                else:
                    k = next(k for k, (a, b) in enumerate(zip(theirs, described[0])) if a != b)
                    what = (
                        f"model {k} differs: {theirs[k][:4]} against rank 0's {described[0][k][:4]}"
                    )
                raise MXKVError(
                    f"rank {rank} describes its models differently from rank 0 "
                    f"({what}, or a layer's shapes): every rank must build the "
                    "same ModelTasks (layers, batches, epochs) in the same order"
                )

    @staticmethod
    def _updater(task: ModelTask):
        """The optimizer gluon.Trainer would make for the whole model, and its updater."""
        params = task.parameters()
        optimizer = mx.optimizer.create(
            task.optimizer, param_dict=dict(enumerate(params)), **task.optimizer_params
        )
        optimizer.rescale_grad = optimizer.rescale_grad / task.batch_size
        return mx.optimizer.get_updater(optimizer)

    def _store_initial_state(self) -> None:
        """Rank 0's parameters and fresh optimizer state, into host memory."""
        if self.rank == 0:
            for chain in self.chains:
                params = {p.name: p.data() for p in chain.task.parameters()}
                optimizer = self._updaters[chain.index].optimizer
                for shard in chain.shards:
                    arrays = {}
                    for layer in shard.layers:
                        for (name, _), index in zip(layer.trainable, layer.indices):
                            arrays[f"param:{name}"] = params[name]
                            state = optimizer.create_state_multi_precision(index, params[name])
                            arrays.update(
                                (f"state:{name}:{k}", a) for k, a in enumerate(flatten_state(state))
                            )
                        arrays.update((f"fixed:{name}", params[name]) for name, _ in layer.fixed)
                    self.store.store(chain.index, arrays)
                self.store.store(
                    chain.index, {"loss": mx.nd.zeros(self.store.shape(chain.index, "loss"))}
                )
        self._comm.Barrier()

    def _program(self, model: int, shard: int) -> ShardProgram:
        key = (model, shard)
        if key not in self._programs:
            self._programs[key] = ShardProgram(
                self.tasks[model], self.chains[model].shards[shard], self.ctx, self._executors
            )
        return self._programs[key]

    # ---- choosing and claiming tasks ----------------------------------------------------
    def _pick(self, progress: np.ndarray, order: np.ndarray, busy: int) -> Optional[int]:
        """The model whose ready task this rank should take (not model `busy`), or None."""
        unfinished = [m for m, c in enumerate(self.chains) if progress[m] // 2 < c.total]
        ready = [m for m in unfinished if progress[m] % 2 == 0 and m != busy]
        if self.schedule == "model-parallel":
            ready = [
                m
                for m in ready
                if m == unfinished[0]
                and self.chains[m].step(progress[m] // 2).shard % self.size == self.rank
            ]
        if not ready:
            return None
        if self.schedule == "fifo":
            return min(ready, key=lambda m: (order[m], m))
        return max(ready, key=lambda m: (self.chains[m].remaining_seconds(progress[m] // 2), -m))

    def _claim(self, wait: bool, busy: int = -1) -> Optional[Step]:
        """A task this rank now owns; None when every model is trained (or, without
        `wait`, when nothing it could take beside model `busy` is ready now or fits)."""
        while True:
            progress, order = self.board.snapshot()
            if all(progress[m] // 2 >= c.total for m, c in enumerate(self.chains)):
                return None
            model = self._pick(progress, order, busy)
            if model is not None:
                step = self.chains[model].step(int(progress[model] // 2))
                if not wait and not self.budget.fits(self._task_bytes(step)):
                    return None
                if self.board.claim(model, step.number):
                    return step
                continue
            if not wait:
                return None
            time.sleep(IDLE_POLL_SECONDS)

    # ---- one task -----------------------------------------------------------------------
    def _task_bytes(self, step: Step) -> int:
        """What loading the task's shard adds to the device (0 when it is resident)."""
        if (step.model, step.shard) in self._cache:
            return 0
        shard = self.chains[step.model].shards[step.shard]
        if step.kind == "forward" and self.schedule != "model-parallel":
            return forward_bytes(shard.layers)
        return shard.bytes

    def _begin_load(self, step: Step, background: bool) -> Load:
        """Reserves the task's bytes, allocates its arrays here (main thread) and fills them
        from host memory, in the background if asked."""
        self._flush_cache(keep_model=step.model)
        program = self._program(step.model, step.shard)
        key = (step.model, step.shard)
        pinned, cached = self.schedule == "model-parallel", key in self._cache
        reserved = self.budget.reserve(
            self._task_bytes(step), f"model {self.tasks[step.model].name!r} shard {step.shard}"
        )
        if cached:
            shard_arrays_here = self._cache[key][0]
        else:
            shard_arrays_here = program.allocate(
                self.budget, self._updaters[step.model].optimizer, pinned or step.kind != "forward"
            )
            if pinned:  # kept resident until the model is trained
                self._cache[key] = (shard_arrays_here, reserved)
                reserved = 0
        batch = self.tasks[step.model].batches[step.batch]
        inputs: Dict[str, mx.nd.NDArray] = {}
        if step.shard == 0:
            inputs["data"] = batch[0].as_in_context(self.ctx)
        if program.shard.last:
            inputs["label"] = batch[1].as_in_context(self.ctx)
        stored: Dict[str, mx.nd.NDArray] = {} if cached else dict(shard_arrays_here.arrays)
        owned = [] if cached or pinned else list(shard_arrays_here.arrays.values())
        if step.shard > 0:
            inputs["data"] = stored[f"boundary:{step.shard - 1}"] = self.budget.take(
                self.store.shape(step.model, f"boundary:{step.shard - 1}")
            )
            owned.append(inputs["data"])
        if step.kind == "backward":
            inputs["gradient"] = stored[f"gradient:{step.shard}"] = self.budget.take(
                self.store.shape(step.model, f"gradient:{step.shard}")
            )
            owned.append(inputs["gradient"])
        return Load(
            step,
            shard_arrays_here,
            inputs,
            reserved,
            cached,
            owned,
            Background(lambda: self.store.load(step.model, stored), background),
        )

    def _compute(self, load: Load) -> Tuple[Dict[str, mx.nd.NDArray], Optional[mx.nd.NDArray]]:
        """Pushes the task's work to MXNet's engine (not waited for): the arrays to store
        and, for a loss task, the batch's loss sum."""
        step = load.step
        program = self._program(step.model, step.shard)
        results: Dict[str, mx.nd.NDArray] = {}
        loss = None
        if step.kind == "forward":
            output = program.forward(load.shard, load.inputs["data"])
            results[f"boundary:{step.shard}"] = kept = self.budget.take(output.shape)
            output.copyto(kept)  # (the executor's memory is the next executor's)
            load.owned.append(kept)
            results.update((k, a) for k, a in load.shard.arrays.items() if k.startswith("fixed:"))
        else:
            gradients, loss = program.train(
                load.shard,
                load.inputs["data"],
                load.inputs.get("label"),
                load.inputs.get("gradient"),
                self._updaters[step.model],
                step.update,
                self.budget,
            )
            load.owned.extend(gradients.values())
            if "data" in gradients:
                results[f"gradient:{step.shard - 1}"] = gradients["data"]
            results.update(
                (k, a)
                for k, a in load.shard.arrays.items()
                if k.startswith(("param:", "state:"))
                or (step.kind == "loss" and k.startswith("fixed:"))
            )
        if load.cached:  # resident: only what other ranks read leaves the device
            results = {k: a for k, a in results.items() if k.startswith(("boundary:", "gradient:"))}
        return results, loss

    def _store(
        self,
        load: Load,
        results: Dict[str, mx.nd.NDArray],
        loss: Optional[mx.nd.NDArray],
        background: bool,
    ) -> Finished:
        """Stores a computed task's results (ready: the caller waited for them), in the
        background if asked, then marks its model's next task ready."""
        step = load.step
        value = None if loss is None else float(loss.asscalar())

        def store() -> None:
            self.store.store(step.model, results)
            if value is not None:
                self._record_loss(step, value)
            self.board.finish(step.model, step.number)

        return Finished(load, Background(store, background))

    def _settle(self, finished: Finished, use: DeviceUse, exposed: bool = True) -> None:
        """Waits for a finished task's store (counted as storing when nothing computes
        meanwhile); frees what it held."""
        waited = finished.storing.wait()
        use.storing += waited if exposed else 0.0
        self.budget.release(finished.load.reserved)
        self.budget.give_back(finished.load.owned)

    def _record_loss(self, step: Step, loss: float) -> None:
        """Adds the batch's loss to its epoch's sum; at an epoch's last batch, prints the
        model's mean loss."""
        chain = self.chains[step.model]
        losses = np.zeros(self.store.shape(step.model, "loss"), np.float32)
        losses[step.epoch] = loss
        self.store.add(step.model, {"loss": mx.nd.array(losses)})
        if self.progress and step.batch == chain.batches - 1:
            total = mx.nd.empty(losses.shape)
            self.store.load(step.model, {"loss": total})
            mean = float(total[step.epoch].asscalar()) / (chain.batches * chain.task.batch_size)
            log.info(
                f"[shard] {chain.task.name}: epoch {step.epoch + 1}/{chain.task.epochs} "
                f"loss {mean:.4f} (rank {self.rank})"
            )

    def _flush_cache(self, keep_model: int = -1) -> None:
        """Stores the resident shards of models other than `keep_model` and frees them."""
        for key in [k for k in self._cache if k[0] != keep_model]:
            loaded, reserved = self._cache.pop(key)
            self.store.store(key[0], loaded.arrays)
            self.budget.release(reserved)
            self.budget.give_back(loaded.arrays.values())

    # ---- the run ------------------------------------------------------------------------
    def run(self) -> Report:
        """Trains every model; returns (on every rank) the report, and leaves each model's
        trained parameters in its net."""
        use = DeviceUse(self.rank, self.budget.limit)
        self._comm.Barrier()
        started = time.perf_counter()
        step = self._claim(wait=True)
        load = self._begin_load(step, background=False) if step else None
        storing: Optional[Finished] = None  # the previous task, its results on their way out
        while load is not None:
            began = time.perf_counter()
            use.loading += load.filling.wait()
            computing = time.perf_counter()
            results, loss = self._compute(load)  # pushed to the engine; runs meanwhile:
            if storing is not None:  # the previous store ends (hidden), then the next loads
                self._settle(storing, use, exposed=False)
            upcoming = self._claim(wait=False, busy=load.step.model) if self.prefetch else None
            next_load = self._begin_load(upcoming, background=True) if upcoming else None
            for array in (*results.values(), *load.shard.arrays.values(), *load.owned):
                array.wait_to_read()  # everything the task writes, stored or kept resident
            ended = time.perf_counter()
            use.computing += ended - computing
            use.tasks += 1
            use.timeline.append((began - started, ended - started, load.step.model, load.step.kind))
            storing = self._store(load, results, loss, background=self.prefetch)
            if next_load is None:  # nothing claimed ahead: this store first, then wait
                self._settle(storing, use)
                storing = None
                step = self._claim(wait=True)
                next_load = self._begin_load(step, background=False) if step else None
            load = next_load
        if storing is not None:
            self._settle(storing, use)
        self._flush_cache()
        self._comm.Barrier()
        seconds = time.perf_counter() - started
        use.peak_bytes = self.budget.peak
        use.bytes_loaded, use.bytes_stored = self.store.bytes_loaded, self.store.bytes_stored
        self._copy_to_nets()
        devices = self._comm.allgather(use)
        report = Report(
            seconds,
            sum(t.epochs * len(t.batches) * t.batch_size for t in self.tasks),
            devices,
            self._losses(),
            {t.name: len(c.shards) for t, c in zip(self.tasks, self.chains)},
            self.schedule,
        )
        if self.progress and self.rank == 0:
            print(report.table(), flush=True)
        return report

    def _copy_to_nets(self) -> None:
        """Every model's trained parameters, from host memory into its net (every rank)."""
        for chain in self.chains:
            arrays = {}
            for shard in chain.shards:
                for key, shape in shard_arrays(shard):
                    if not key.startswith("state:"):
                        arrays[key] = mx.nd.empty(shape)
            self.store.load(chain.index, arrays)
            for param in chain.task.parameters():
                kind = "fixed" if param.grad_req == "null" else "param"
                param.set_data(arrays[f"{kind}:{param.name}"])

    def _losses(self) -> Dict[str, List[float]]:
        losses = {}
        for chain in self.chains:
            total = mx.nd.empty(self.store.shape(chain.index, "loss"))
            self.store.load(chain.index, {"loss": total})
            losses[chain.task.name] = [
                float(v) / (chain.batches * chain.task.batch_size) for v in total.asnumpy()
            ]
        return losses

    def close(self) -> None:
        """Frees the shared windows (collective)."""
        self.board.close()
        self.store.close()
