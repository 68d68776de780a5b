"""Python face of the C++ tensor collectives: keys and NDArrays in, errors that name keys out."""

import atexit
import hashlib
import secrets
import weakref
from typing import Hashable, List, Optional, Sequence, Tuple

import mxnet as mx
import numpy as np

from ..config import LASGD_OVERLAP_MAX_DELAY, Config
from ..errors import ConfigError, MismatchError, MXKVError, RankLostError
from . import algorithm_table, row_sparse, stall, timeline
from .device_staging import DeviceStaging
from .dtype_codes import DTYPE_CODES
from .extension import extension
from .hierarchy import use_hierarchy
from .topology import Groups

Key = Hashable  # int or str, as MXNet passes them
Arrays = Sequence[mx.nd.NDArray]


def _key_signature(keys: Sequence[Key]) -> int:
    """A hash of the keys that is the same in every process (unlike hash())."""
    digest = hashlib.blake2b(repr(tuple(keys)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little")


HOST_DEVICES = ("cpu", "cpu_pinned", "cpu_shared")  # MXNet memory the C++ reads in place
_CODE_OF_NUMPY_CHAR = {"f": 0, "d": 1, "e": 2, "H": 12}  # uint16 carries bfloat16 bits


_LIVE: "weakref.WeakSet[TensorCollectives]" = weakref.WeakSet()


def live_collectives() -> List["TensorCollectives"]:
    """Every TensorCollectives of this process still in use (MXKV_SUMMARY_EVERY counts their
    bytes)."""
    return list(_LIVE)


def _handles(arrays: Arrays) -> List[int]:
    return [a.handle.value for a in arrays]


def _require_thread_multiple() -> None:
    """Collectives behind MXNet's engine run on a thread of their own while the caller's
    thread makes MPI calls too: MPI must allow that."""
    from mpi4py import MPI

    if MPI.Query_thread() < MPI.THREAD_MULTIPLE:
        raise ConfigError(
            "collectives behind MXNet's engine (MXKV_OVERLAP=1, or mode lasgd's average with "
            "MXKV_LASGD_OVERLAP=1, its rule's choice while MXKV_TAU / MXKV_FRAGMENTS <= "
            f"{LASGD_OVERLAP_MAX_DELAY}) "
            "need MPI initialised with MPI_THREAD_MULTIPLE, "
            "mpi4py's default: set that knob to 0, or leave mpi4py.rc.thread_level and "
            "MPI4PY_RC_THREAD_LEVEL unset"
        )


def _algorithm_rules(comm, config: Config, ranks: int) -> list:
    """Collective: rank 0's auto rules for allreduces over `ranks` ranks ([] unless auto)."""
    rules = None
    if comm.rank == 0 and config.algorithm == "auto":
        path = config.algorithm_table or algorithm_table.default_path()
        rules = algorithm_table.rules_for(algorithm_table.load(path), ranks)
    return comm.bcast(rules, root=0) or []


class TensorCollectives:
    """Fused allreduce and broadcast of many keys' arrays over one communicator."""

    def __init__(
        self, comm, config: Config, groups: Optional[Groups] = None, hierarchy: str = "off"
    ):
        """comm: an mpi4py communicator (collective: every rank of it constructs one).
        groups (comm must then be the world's): the groups its ranks form,
        so that bytes across groups are counted apart and go through the emulated slow link
        (MXKV_THROTTLE_*); hierarchy (MXKV_HIERARCHY's auto|on|off, with groups): whether
        allreduces are hierarchical."""
        self._comm = comm
        if config.overlap:
            _require_thread_multiple()
        built = extension()
        self._mpi_failure = built.MPIFailure  # an MPI call that failed at run time
        self._impl = built.TensorCollectives(
            comm.py2f(),
            config.bucket_bytes,
            config.algorithm,
            _algorithm_rules(comm, config, comm.size),
            config.compress_dtype,
            config.segment_bytes,
        )
        if groups is not None:
            self._span_groups(config, groups, hierarchy)
        self._overlap = config.overlap
        self._staging = DeviceStaging()
        recording = timeline.current()
        if recording is not None:
            recording.add_source(self._impl)
        if self._overlap:  # the communication thread ends before mpi4py finalises MPI
            atexit.register(self._impl.finish_overlapped, True)
            stall.watch_background(self.overlapped_bucket_seconds)
        _LIVE.add(self)

    @property
    def comm(self):
        """The mpi4py communicator these collectives run over."""
        return self._comm

    @property
    def bucket_bytes(self) -> int:
        return self._impl.bucket_bytes

    @property
    def bytes_sent_inside(self) -> int:
        """Bytes this rank has sent (as they travel) to ranks of its own group so far."""
        return self._impl.bytes_sent_inside

    @property
    def bytes_sent_across(self) -> int:
        """Bytes this rank has sent (as they travel) to ranks of other groups so far."""
        return self._impl.bytes_sent_across

    @property
    def hierarchical(self) -> bool:
        """Whether allreduces run hierarchically (MXKV_HIERARCHY)."""
        return self._impl.hierarchical

    @property
    def staged_bytes(self) -> int:
        """Bytes copied between non-cpu devices and pinned host buffers so far, both ways."""
        return self._staging.staged_bytes

    @property
    def overlapped_buckets(self) -> int:
        """Buckets queued behind MXNet's engine so far (MXKV_OVERLAP=1)."""
        return self._impl.overlapped_buckets

    @property
    def overlapped_buckets_pending(self) -> int:
        """Of those, the buckets not yet reduced (in flight)."""
        return self._impl.overlapped_buckets_pending

    def overlapped_bucket_seconds(self) -> float:
        """How long the communication thread has been reducing its current bucket (0: idle)."""
        return self._impl.overlapped_bucket_seconds

    def _span_groups(self, config: Config, groups: Groups, hierarchy: str) -> None:
        group_of_rank = self._comm.allgather(groups.group_index)
        shared_link = ""
        if config.throttle_mbps and len(set(group_of_rank)) > 1:
            # the emulated link is the group's, shared by its ranks as a host's card is
            shared_link = (
                f"/mxkv-link-{self._comm.bcast(secrets.token_hex(6))}-{groups.group_index}"
            )
        self._impl.span_groups(
            group_of_rank, config.throttle_mbps, config.throttle_latency_ms / 1000, shared_link
        )
        if shared_link:
            self._comm.Barrier()  # every rank has it open: its name can go
            extension().TensorCollectives.unlink_shared_link(shared_link)
        if use_hierarchy(hierarchy, group_of_rank):
            # the ranks holding the same slice: this rank's index in every group
            cross = self._comm.Split(color=groups.group_comm.Get_rank(), key=groups.group_index)
            # (across groups, auto takes the ring: csrc/tensor_collectives.h)
            self._impl.set_hierarchy(groups.group_comm.py2f(), cross.py2f())
            cross.Free()  # the C++ keeps duplicates of both

    def allreduce_vector(self, array: np.ndarray, algorithm: str, scale: float = 1.0) -> None:
        """In place: array = scale * its sum over ranks (float32/float64/float16; for
        bfloat16 pass the uint16 bits with dtype='bfloat16'), by the named algorithm
        (across groups, when hierarchical)."""
        self._impl.allreduce_vector(array, _CODE_OF_NUMPY_CHAR[array.dtype.char], algorithm, scale)

    def algorithm_for(self, dtype: str, nbytes: int) -> str:
        """The algorithm a bucket of `nbytes` of `dtype` takes (auto resolved)."""
        return self._impl.algorithm_for(DTYPE_CODES[dtype], nbytes)

    def allreduce(
        self,
        op: str,
        keys: Sequence[Key],
        inputs: Sequence[Arrays],
        outputs: Sequence[Arrays],
        average: bool,
    ) -> None:
        """outputs[k] = (average of, or sum over ranks of) sum(inputs[k]), for every key k.
        With MXKV_OVERLAP=1 it returns once the buckets are queued behind MXNet's engine:
        MXNet operations that read the outputs wait for them, as after any MXNet op.
        Arrays on other devices than `cpu` travel through pinned host buffers (DeviceStaging).
        row_sparse values are summed by the sparse collective, key by key (row_sparse.py)."""
        sparse = {i for i, copies in enumerate(inputs) if row_sparse.is_row_sparse(copies[0])}
        if sparse:
            chosen = sorted(sparse)
            row_sparse.sum_into(
                self,
                op,
                [keys[i] for i in chosen],
                [inputs[i] for i in chosen],
                [outputs[i] for i in chosen],
                average,
            )
            keys, inputs, outputs = row_sparse.dense_entries(sparse, keys, inputs, outputs)
            if not keys:
                return
        host_inputs, host_outputs, copy_back = self._staging.stage(keys, inputs, outputs)
        spec = [(_handles(i), _handles(o)) for i, o in zip(host_inputs, host_outputs)]
        run = self._impl.allreduce_overlapped if self._overlap else self._impl.allreduce
        self._run(op, keys, host_outputs, lambda: run(spec, _key_signature(keys), average))
        copy_back()

    def broadcast(
        self,
        op: str,
        keys: Sequence[Key],
        inputs: Sequence[Arrays],
        outputs: Sequence[Arrays],
        root: int = 0,
    ) -> None:
        """outputs[k] = root's inputs[k][0] on every rank."""
        host_inputs, host_outputs, copy_back = self._staging.stage(
            keys, inputs, outputs, read_inputs=self._comm.rank == root
        )
        spec = [(_handles(i), _handles(o)) for i, o in zip(host_inputs, host_outputs)]
        self._run(
            op, keys, host_outputs, lambda: self._impl.broadcast(spec, _key_signature(keys), root)
        )
        copy_back()

    def sum_sparse_rows(
        self,
        op: str,
        key: Key,
        array: mx.nd.NDArray,
        ids: np.ndarray,
        rows: np.ndarray,
        average: bool,
    ) -> Tuple[np.ndarray, np.ndarray, str]:
        """The sum (average) over ranks of row_sparse values of `key` (`array`: this rank's,
        whose shape and dtype every rank must share; `ids`: its sorted row ids, int64;
        `rows`: those rows, C-contiguous): (the union of the ids, their summed rows, the
        path the rows took: 'allgather' or 'union allreduce'; csrc/sparse_rows.h)."""
        row_shape = tuple(array.shape[1:])
        signature = _key_signature(
            [("row_sparse", key, tuple(array.shape), np.dtype(array.dtype).name)]
        )
        with stall.waiting(f"{op} of row_sparse key {key!r}"), timeline.span(
            op, "collective", keys=1
        ):
            result = self._impl.sparse_row_sum(
                ids,
                rows,
                int(np.prod(row_shape)),
                _CODE_OF_NUMPY_CHAR[rows.dtype.char],
                signature,
                average,
            )
        if result is None:
            self._raise_mismatch(op, [key], [[array]])
        union, summed, path = result
        return union, summed.view(rows.dtype).reshape((len(union),) + row_shape), path

    def allreduce_quantised(
        self,
        op: str,
        keys: Sequence[Key],
        inputs: Sequence[Arrays],
        outputs: Sequence[Arrays],
        average: bool,
        kind: int,
        threshold: float,
    ) -> None:
        """allreduce() of float32 arrays, quantised (csrc/quantiser.h; kind 0: MXNet's 2-bit
        with `threshold`, 1: 1-bit SGD's): each rank's sum over its devices (or, when
        hierarchical, each group's sum) quantised with the residual kept per key (error
        feedback), the codes summed."""
        host_inputs, host_outputs, copy_back = self._staging.stage(keys, inputs, outputs)
        spec = [(_handles(i), _handles(o)) for i, o in zip(host_inputs, host_outputs)]
        residual_keys = [_key_signature([k]) for k in keys]
        self._run(
            op,
            keys,
            host_outputs,
            lambda: self._impl.allreduce_quantised(
                spec, _key_signature(keys), residual_keys, kind, threshold, average
            ),
        )
        copy_back()

    def quantiser_residual(self, key: Key) -> np.ndarray:
        """This rank's residual of `key` (what quantisation has not sent yet)."""
        return np.array(self._impl.quantiser_residual(_key_signature([key])), dtype=np.float32)

    def set_quantiser_residual(self, key: Key, residual: np.ndarray) -> None:
        """Replaces this rank's residual of `key` (a checkpoint's, loaded)."""
        self._impl.set_quantiser_residual(_key_signature([key]), residual.ravel().tolist())

    def finish(self) -> None:
        """Waits until every bucket queued behind MXNet's engine (overlap) is reduced."""
        self._impl.finish_overlapped(False)

    def plan(self, tensors: Sequence[tuple]) -> list:
        """The bucket plan for [(mxnet dtype code, element count), ...] (for tests and
        benchmarks)."""
        return self._impl.plan(list(tensors))

    def _run(self, op, keys, outputs, call) -> None:
        try:
            with stall.waiting(f"{op} of {len(keys)} key(s)"), timeline.span(
                op, "collective", keys=len(keys)
            ):
                agreed = call()
        except self._mpi_failure as failure:
            raise RankLostError(
                f"{op} of {len(keys)} key(s) failed inside MPI "
                f"({str(failure).splitlines()[0]}): a rank of this job ended or the link to it "
                "broke; the launcher's output names which"
            ) from None
        except ValueError as err:
            if len(err.args) == 2 and isinstance(err.args[1], int):
                message, index = err.args
                raise MXKVError(f"{op}: key {keys[index]!r}: {message}") from None
            raise
        if not agreed:
            self._raise_mismatch(op, keys, outputs)

    def _raise_mismatch(self, op: str, keys: Sequence[Key], outputs: Sequence[Arrays]) -> None:
        """Every rank gets here together: gather what each passed and name the difference."""
        mine = [(k, np.dtype(o[0].dtype).name, tuple(o[0].shape)) for k, o in zip(keys, outputs)]
        with stall.waiting(f"{op}: comparing the keys of a mismatched call"):
            everyone = self._comm.allgather(mine)
        detail = _first_difference(everyone)
        raise MismatchError(
            f"{op}: ranks disagree on the arrays of this call: {detail}. Every rank must pass "
            "the same keys, in the same order, with the same shapes and dtypes."
        )


def _first_difference(per_rank: List[list]) -> str:
    lengths = [len(entries) for entries in per_rank]
    for position in range(max(lengths)):
        seen = {
            r: (entries[position] if position < len(entries) else None)
            for r, entries in enumerate(per_rank)
        }
        if len(set(seen.values())) > 1:
            return "; ".join(
                f"rank {r} has " + ("nothing" if e is None else f"key {e[0]!r} {e[1]} {e[2]}")
                for r, e in seen.items()
            )
    return f"the ranks passed {lengths} keys"  # pragma: no cover - signatures differed
