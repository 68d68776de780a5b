"""MXKV_CHECK_FINITE: before a pushpull combines anything, every rank checks its own
values for NaN/Inf (one multi_all_finite over all arrays) and the ranks stepping together
agree on the result (one 4-byte allreduce). When any rank has one, every rank raises
NonFiniteError naming the first key and the ranks with it; nothing was combined, so the
weights are those of the last good step."""

from typing import Optional, Sequence

import mxnet as mx

from ..comm.lockstep import all_agree, lockstep_comm
from ..errors import NonFiniteError


def _all_finite(arrays: Sequence[mx.nd.NDArray]) -> bool:
    return bool(mx.nd.multi_all_finite(*arrays, num_arrays=len(arrays)).asscalar())


def _first_non_finite(keys: Sequence, values: Sequence[Sequence[mx.nd.NDArray]]) -> Optional[str]:
    for key, arrays in zip(keys, values):
        if not _all_finite(arrays):
            return repr(key)
    return None


def check_finite(
    op: str, keys: Sequence, values: Sequence[Sequence[mx.nd.NDArray]], rank: int
) -> None:
    """Collective among the ranks in lockstep: raises NonFiniteError on every rank of them
    if any of them has a NaN/Inf among `values`."""
    flat = [array for arrays in values for array in arrays]
    mine_ok = _all_finite(flat) if flat else True
    if all_agree(mine_ok, f"{op}: the finite-value check (MXKV_CHECK_FINITE)"):
        return
    first = None if mine_ok else _first_non_finite(keys, values)
    comm = lockstep_comm()
    found = [(rank, first)] if comm is None else comm.allgather((rank, first))
    culprits = "; ".join(f"rank {r}: key {k}" for r, k in found if k is not None)
    raise NonFiniteError(
        f"{op}: NaN or Inf in the values to combine (the first key with one per rank: "
        f"{culprits}). Nothing was combined or updated. Lower the learning rate, check the "
        "data, or clip gradients; MXKV_CHECK_FINITE=0 turns this check off."
    )
