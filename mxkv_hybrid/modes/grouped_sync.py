"""MXKV_MODE=sync: groups joined by MXNet's parameter server, synchronously.

A step: the ranks of each group sum their gradients with the tensor-collective allreduce
straight into the leader's fused buffer; the leaders push that buffer, in balanced
chunks, to MXNet's dist_sync servers and pull back the sum over all groups; the leader
scales it (average) and broadcasts it inside its group. The result is the same as one
allreduce over all ranks (mode allreduce), up to float rounding.

This is the path of gradients when every rank updates its own weights
(update_on_kvstore=False) and of values that are not weights; with the optimizer on the
store, the weights move to the servers, which run it (server_weights.py).

row_sparse values: the group's ranks sum their rows with the sparse collective; the
leaders cross the groups dense (the rows scattered into the key's full shape, with a
vector marking which rows a group had), since ps-lite's servers keep a row_sparse key
only under an optimizer; every rank gets the union of all groups' rows. Weights updated
on the servers cross as rows (server_weights.py).

With set_gradient_compression (2bit, 1bit) the leaders' float32 sums cross as codes that
the servers sum (ps/summed_codes.py); the optimizer then stays on the workers.
"""

import atexit
from dataclasses import replace
from typing import Dict, List, Optional, Sequence, Tuple

import mxnet as mx
import numpy as np

from ..comm import row_sparse
from ..comm.collectives import Arrays, Key, TensorCollectives
from ..comm.compression_params import Compression
from ..comm.lockstep import tie_groups
from ..comm.topology import Groups, World, wait_for_leader
from ..config import Config
from ..ps.client import connect_leader, release
from ..ps.summed_codes import SummedCodes

Layout = Tuple[List[mx.nd.NDArray], List[mx.nd.NDArray]]  # fused buffers, per-key views


class GroupedSync:
    def __init__(self, config: Config, world: World, groups: Groups):
        self._world_size = world.size
        self._group_comm = groups.group_comm
        self._group_index = groups.group_index
        self._group = TensorCollectives(groups.group_comm, replace(config, overlap=False))
        self._layouts: Dict[Tuple, Layout] = {}
        self._num_groups = groups.num_groups
        self._ps = connect_leader("dist_sync", config, world, groups)
        self._codes: Optional[SummedCodes] = None  # compress_across_groups
        if not world.spans_all_ranks:  # epoch ends and finite checks must span the groups
            tie_groups(self.agree_across_groups)
        if self._ps is not None:
            atexit.register(self.close)

    def allreduce(
        self,
        op: str,
        keys: Sequence[Key],
        inputs: Sequence[Arrays],
        outputs: Sequence[Arrays],
        average: bool,
    ) -> None:
        sparse = [i for i, copies in enumerate(inputs) if row_sparse.is_row_sparse(copies[0])]
        for i in sparse:
            self._allreduce_rows(op, keys[i], inputs[i], outputs[i], average)
        if sparse:
            keys, inputs, outputs = row_sparse.dense_entries(sparse, keys, inputs, outputs)
            if not keys:
                return
        if self._ps is None:
            self._group.allreduce(op, keys, inputs, outputs, average=False)
            wait_for_leader(self._group_comm, is_leader=False)
            self._group.broadcast(op, keys, outputs, outputs, root=0)
            return
        layout_id = tuple((k, o[0].shape, np.dtype(o[0].dtype).name) for k, o in zip(keys, outputs))
        buffers, views = self._layout(layout_id, outputs)
        fused = [[v] for v in views]
        self._group.allreduce(op, keys, inputs, fused, average=False)
        self._sum_across_groups(layout_id, buffers)
        if average:
            for buffer in buffers:
                buffer *= 1.0 / self._world_size
        wait_for_leader(self._group_comm, is_leader=True)
        self._group.broadcast(op, keys, fused, outputs, root=0)

    def compress_across_groups(self, compression: Compression) -> None:
        """From now on the leaders' float32 group sums cross the groups as codes the
        servers sum (ps/summed_codes.py); other dtypes and row_sparse values as they are."""
        self._codes = SummedCodes(compression, self._group_index, self._num_groups)

    @property
    def compresses_across_groups(self) -> bool:
        """Whether compress_across_groups was called (the servers then sum codes)."""
        return self._codes is not None

    def _sum_across_groups(self, layout_id: Tuple, buffers: Sequence[mx.nd.NDArray]) -> None:
        """The leader's fused buffers become the sums over all groups (float32 ones as
        summed codes once compressed)."""
        ps, codes = self._ps, self._codes
        assert ps is not None  # (the leader's)
        is_coded = [codes is not None and b.dtype == np.float32 for b in buffers]
        coded = [b for b, c in zip(buffers, is_coded) if c]
        plain = [b for b, c in zip(buffers, is_coded) if not c]
        if plain:
            ps.sum_across_groups(ps.chunks_for(layout_id, plain))
        if codes is not None:  # (else nothing is coded)
            for buffer in coded:
                codes.sum_across_groups(ps, layout_id + (codes.compression,), buffer)

    def _allreduce_rows(
        self, op: str, key: Key, inputs: Arrays, outputs: Arrays, average: bool
    ) -> None:
        """outputs = the sum (average) over all ranks of row_sparse `inputs`, on the union
        of their rows: summed in the group, crossed dense by the leaders (module doc)."""
        summed = row_sparse.sum_over_ranks(self._group, op, key, inputs, average=False)
        if self._ps is not None:
            shape, dtype = summed.shape, np.dtype(summed.dtype).name
            layout_id = (("rows", key, shape, dtype),)
            if layout_id not in self._layouts:
                self._layouts[layout_id] = (
                    [mx.nd.zeros(shape, dtype=dtype), mx.nd.zeros((shape[0],), dtype=np.float32)],
                    [],
                )
            (values, marks), _ = self._layouts[layout_id]
            values[:] = summed.tostype("default")
            marked = np.zeros(shape[0], np.float32)
            marked[summed.indices.asnumpy()] = 1
            marks[:] = marked
            self._ps.sum_across_groups(self._ps.chunks_for(layout_id, [values, marks]))
            union = np.flatnonzero(marks.asnumpy()).astype(np.int64)
            rows = values.asnumpy()[union] * (1.0 / self._world_size if average else 1.0)
            summed = mx.nd.sparse.row_sparse_array(
                (rows.astype(dtype), union), shape=shape, dtype=dtype
            )
        wait_for_leader(self._group_comm, is_leader=self._ps is not None)
        summed = row_sparse.broadcast(self._group, op, key, summed)
        for out in outputs:
            row_sparse.write_into(summed, out)

    def agree_across_groups(self, flag: bool) -> bool:
        """Collective of this group, with the group's result: True when every group's is
        (the leaders count the true ones on the dist_sync servers)."""
        result = np.array([flag], np.int32)
        if self._ps is not None:
            result[0] = self._ps.count_across_groups(flag) == self._num_groups
        wait_for_leader(self._group_comm, is_leader=self._ps is not None)
        self._group_comm.Bcast(result, root=0)
        return bool(result[0])

    def share_across_groups(self, op: str, keys: Sequence[Key], arrays: Sequence[Arrays]) -> None:
        """Separate group jobs: arrays[k] (equal inside the group) become group 0's in every
        group, as the one MPI job's broadcast from rank 0 would make them: the leaders sum
        group 0's values and the other groups' zeros through fresh keys on the servers."""
        if self._ps is not None:
            if self._group_index != 0:
                for array in arrays:
                    array[0][:] = 0
            self._ps.sum_across_groups(self._ps.new_chunks([a[0] for a in arrays]))
        wait_for_leader(self._group_comm, is_leader=self._ps is not None)
        self._group.broadcast(op, keys, [[a[0]] for a in arrays], arrays, root=0)

    def _layout(self, layout_id: Tuple, outputs: Sequence[Arrays]) -> Layout:
        """One flat buffer per dtype, and a view of it shaped like each key's array."""
        if layout_id not in self._layouts:
            sizes: Dict[str, int] = {}
            placed = []
            for _, shape, dtype in layout_id:
                start = sizes.get(dtype, 0)
                sizes[dtype] = start + int(np.prod(shape))
                placed.append((dtype, start, shape))
            buffers = {d: mx.nd.zeros((n,), dtype=d) for d, n in sizes.items()}
            views = [
                buffers[d][s : s + int(np.prod(shape))].reshape(shape) for d, s, shape in placed
            ]
            self._layouts[layout_id] = (list(buffers.values()), views)
        return self._layouts[layout_id]

    def close(self) -> None:
        """Releases this store's use of the parameter server (leaders); safe to call twice."""
        if self._ps is not None:
            self._ps = None
            release()
