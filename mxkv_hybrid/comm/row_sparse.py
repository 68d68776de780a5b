"""row_sparse NDArrays through the sparse collective: a rank's devices summed, the rows
summed over ranks (TensorCollectives.sum_sparse_rows), and the rows a pull asks for.
TensorCollectives.allreduce hands its row_sparse values here (sum_into)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable, Sequence

import mxnet as mx
import numpy as np

if TYPE_CHECKING:  # collectives.py imports this module
    from .collectives import Key, TensorCollectives

ROW_SPARSE = "row_sparse"


def is_row_sparse(array: mx.nd.NDArray) -> bool:
    return array.stype == ROW_SPARSE


def zeros_like(array: mx.nd.NDArray) -> mx.nd.NDArray:
    """An empty row_sparse array (no rows) of `array`'s shape, dtype and context."""
    return mx.nd.sparse.zeros(ROW_SPARSE, array.shape, ctx=array.context, dtype=array.dtype)


def sum_over_ranks(
    collectives: TensorCollectives,
    op: str,
    key: Key,
    copies: Sequence[mx.nd.NDArray],
    average: bool,
) -> mx.nd.NDArray:
    """The row_sparse sum (average) over ranks of this rank's copies (one per device)."""
    mine = copies[0] if len(copies) == 1 else mx.nd.add_n(*[c.copyto(mx.cpu()) for c in copies])
    ids = np.ascontiguousarray(mine.indices.asnumpy(), dtype=np.int64)
    rows = np.ascontiguousarray(mine.data.asnumpy())
    union, summed, _ = collectives.sum_sparse_rows(op, key, mine, ids, rows, average)
    # MXNet copies the rows in once from NDArrays that view the numpy results (twice from
    # numpy arrays)
    return mx.nd.sparse.row_sparse_array(
        (mx.nd.from_numpy(summed, zero_copy=True), mx.nd.from_numpy(union, zero_copy=True)),
        shape=mine.shape,
        ctx=mine.context,
        dtype=mine.dtype,
    )


def sum_into(
    collectives: TensorCollectives,
    op: str,
    keys: Sequence[Key],
    inputs: Sequence[Sequence[mx.nd.NDArray]],
    outputs: Sequence[Sequence[mx.nd.NDArray]],
    average: bool,
) -> None:
    """outputs[k] = the sum (average) over ranks of row_sparse inputs[k], key by key."""
    for key, copies, outs in zip(keys, inputs, outputs):
        summed = sum_over_ranks(collectives, op, key, copies, average)
        for out in outs:
            write_into(summed, out)


def broadcast(
    collectives: TensorCollectives, op: str, key: Key, value: mx.nd.NDArray, root: int = 0
) -> mx.nd.NDArray:
    """Rank `root`'s row_sparse value, on every rank: the sparse collective's sum when
    only the root sends rows (its rows plus zeros: the same values)."""
    mine = value if collectives.comm.rank == root else zeros_like(value)
    return sum_over_ranks(collectives, op, key, [mine], average=False)


def write_into(value: mx.nd.NDArray, out: mx.nd.NDArray) -> None:
    """out = value, whatever either's storage (a dense out gets the rows, zeros elsewhere)."""
    if out.stype == value.stype:
        value.copyto(out)
    else:
        value.tostype(out.stype).copyto(out)


def with_every_row(value: mx.nd.NDArray) -> mx.nd.NDArray:
    """`value` (dense or row_sparse) as a row_sparse array that lists every row, zero rows
    included: how MXNet's parameter servers keep a row_sparse key (its init must send
    every row; the servers then address a row by its id)."""
    dense = value.tostype("default") if is_row_sparse(value) else value
    every = mx.nd.arange(value.shape[0], ctx=value.context, dtype=np.int64)
    return mx.nd.sparse.row_sparse_array(
        (dense, every), shape=value.shape, ctx=value.context, dtype=value.dtype
    )


def rows_of(kept: mx.nd.NDArray, row_ids: mx.nd.NDArray) -> mx.nd.NDArray:
    """The rows `row_ids` (any order, repeats allowed) of a kept value, as row_sparse."""
    wanted = np.unique(row_ids.asnumpy().astype(np.int64))
    if is_row_sparse(kept):
        return mx.nd.sparse.retain(kept, mx.nd.array(wanted, ctx=kept.context, dtype=np.int64))
    rows = mx.nd.take(kept, mx.nd.array(wanted, ctx=kept.context, dtype=np.int64))
    return mx.nd.sparse.row_sparse_array(
        (rows, wanted), shape=kept.shape, ctx=kept.context, dtype=kept.dtype
    )


def dense_entries(sparse: Iterable[int], *lists: Sequence) -> tuple:
    """`lists` without their entries at the positions `sparse` (the row_sparse ones)."""
    dropped = set(sparse)
    return tuple([x for i, x in enumerate(entries) if i not in dropped] for entries in lists)
