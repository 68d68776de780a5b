"""The group leaders' bridge to MXNet's own ps-lite parameter server (dist kvstore)."""

import ctypes
import os
import time
from contextlib import contextmanager
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import mxnet as mx
import numpy as np
from mxnet.base import _LIB, check_call

from ..comm import timeline
from ..comm.link_throttle import LinkThrottle, link_throttle
from ..comm.pacing import BATCHES_AHEAD, paced
from ..comm.topology import end_job
from ..config import read_knob
from ..errors import ConfigError
from ..launch.control.keeper import tell_launcher_met
from ..safety.watchdog import Watchdog
from .keys import ServerKeys
from .layout import Chunk, balanced_chunks, bigarray_bound
from .node_addresses import PsNodes, check_free
from .optimizers import AGREE_KEY, CHUNK_KEYS
from .scheduler_reach import wait_for_scheduler

REQUIRED = ("DMLC_PS_ROOT_URI", "DMLC_PS_ROOT_PORT", "DMLC_NUM_SERVER", "DMLC_NUM_WORKER")


def check_environment(mode: str, num_groups: int) -> int:
    """Validates the DMLC_* variables on every rank; returns the number of servers."""
    missing = [name for name in REQUIRED if not os.environ.get(name)]
    if missing:
        raise ConfigError(
            f"MXKV_MODE={mode} joins the groups through MXNet's parameter server, but "
            f"{', '.join(missing)} is not set: start the job with "
            "`mxkv-launch -n N --servers S [--group-size G] -- python ...`"
        )
    workers = int(os.environ["DMLC_NUM_WORKER"])
    if workers != num_groups:
        raise ConfigError(
            f"DMLC_NUM_WORKER={workers}, but this job has {num_groups} groups (only group "
            "leaders talk to the parameter server): set DMLC_NUM_WORKER to the number of "
            "groups, or let mxkv-launch set it (--group-size)"
        )
    if os.environ.get("DMLC_ROLE", "worker") != "worker":
        raise ConfigError(
            f"DMLC_ROLE={os.environ['DMLC_ROLE']} on an MPI rank: ranks are "
            "workers; servers and the scheduler are separate processes"
        )
    return int(os.environ["DMLC_NUM_SERVER"])


class ParameterServer:
    """A dist kvstore on one group leader, with balanced fused chunks and timeouts.

    ps-lite allows one dist kvstore per process, so every Hybrid store of a process
    shares one ParameterServer (see acquire/release)."""

    def __init__(
        self,
        kind: str,
        num_servers: int,
        timeout: float,
        watchdog: Watchdog,
        throttle: Optional[LinkThrottle] = None,
        separate_groups: bool = False,
        rejoining: bool = False,
    ):
        self.kind = kind
        self._throttle = throttle
        self._timeout = timeout
        self._watchdog = watchdog
        self._num_servers = num_servers
        # a restarted group's leader: the servers hold its keys and optimizer already
        self._rejoining = rejoining
        host, port = os.environ["DMLC_PS_ROOT_URI"], int(os.environ["DMLC_PS_ROOT_PORT"])
        address = f"{host}:{port}"
        wait_for_scheduler(host, port, timeout, watchdog.who)
        with watchdog.guard(
            f"connecting to the parameter server (scheduler {address}, {num_servers} server(s))",
            timeout,
        ):
            self._store = mx.kv.create(kind)
        if separate_groups:
            # Separate group jobs live and die alone: leaving must not wait for the other
            # leaders (ps-lite's exit barrier would wait for ever for a lost one). Nobody
            # then stops the servers: mxkv-launch ends them when every group job is over.
            check_call(_LIB.MXKVStoreSetBarrierBeforeExit(self._store.handle, ctypes.c_int(0)))
        self._chunks: Dict[Tuple, List[Tuple[int, mx.nd.NDArray]]] = {}
        self._crossing: Dict[Tuple[int, ...], List[mx.nd.NDArray]] = {}  # sum_across_groups
        self._agreed: Optional[mx.nd.NDArray] = None  # AGREE_KEY's last sum
        self._next_key = CHUNK_KEYS.start
        self._keys = ServerKeys()  # the chunk keys, claimed in this process
        self.bytes_pushed = 0
        self.bytes_pulled = 0

    @property
    def num_servers(self) -> int:
        return self._num_servers

    def chunks_for(
        self, layout_id: Tuple, buffers: Sequence[mx.nd.NDArray]
    ) -> List[Tuple[int, mx.nd.NDArray]]:
        """(PS key, view) pairs covering the fused buffers; created and initialised once."""
        if layout_id not in self._chunks:
            self._chunks[layout_id] = self.new_chunks(buffers)
        return self._chunks[layout_id]

    def new_chunks(self, arrays: Sequence[mx.nd.NDArray]) -> List[Tuple[int, mx.nd.NDArray]]:
        """Fresh (PS key, view) pairs covering `arrays` in balanced chunks, their keys
        created on the servers with zeros (an init: a barrier among the leaders)."""
        pairs = []
        for array in arrays:
            flat = array.reshape((-1,))
            chunks: List[Chunk] = balanced_chunks(
                flat.size, self._num_servers, self._next_key, bigarray_bound()
            )
            if chunks:
                self._next_key = chunks[-1].key + 1
            for chunk in chunks:
                self._keys.claim(chunk.key, "a fused chunk of mode sync")
            pairs += [(c.key, flat[c.start : c.stop]) for c in chunks]
        self.init([k for k, _ in pairs], [mx.nd.zeros(v.shape, dtype=v.dtype) for _, v in pairs])
        return pairs

    def count_across_groups(self, flag: bool) -> int:
        """dist_sync: how many leaders pushed a true `flag` in this round (every leader
        calls it at the same point; the first call creates the key)."""
        if self._agreed is None:
            self.init([AGREE_KEY], [mx.nd.zeros((1,))])
            self._agreed = mx.nd.zeros((1,))
        self.push_pull([AGREE_KEY], [mx.nd.array([float(flag)])], [self._agreed])
        return round(float(self._agreed.asscalar()))

    def sum_across_groups(self, pairs: Sequence[Tuple[int, mx.nd.NDArray]]) -> None:
        """dist_sync: pushes every chunk and pulls back the sum over all groups, in place."""
        keys, views = [k for k, _ in pairs], [v for _, v in pairs]
        # the chunks cross in arrays of their own (push_pull)
        if tuple(keys) not in self._crossing:
            self._crossing[tuple(keys)] = [mx.nd.empty(v.shape, dtype=v.dtype) for v in views]
        crossing = self._crossing[tuple(keys)]
        for view, array in zip(views, crossing):
            view.copyto(array)
        self.push_pull(keys, crossing, crossing)
        for array, view in zip(crossing, views):
            array.copyto(view)

    def init(self, keys: Sequence, values: Sequence[mx.nd.NDArray]) -> None:
        """Creates the keys on the servers (the value of ps-lite's worker 0 is kept). A
        rejoining leader creates nothing: MXNet would push its values again, and the
        servers' optimizer would take them for an update."""
        if self._rejoining:
            return
        with self._watchdog.guard(f"initialising {len(keys)} parameter-server keys", self._timeout):
            self._store.init(list(keys), list(values))
            mx.nd.waitall()

    def set_optimizer(self, optimizer: mx.optimizer.Optimizer) -> None:
        """Sends the optimizer to the servers (dist_async: they apply every push to the
        weights); not again from a rejoining leader (it would reset the optimizer's state)."""
        if self._rejoining:
            return
        with self._watchdog.guard("sending the optimizer to the parameter servers", self._timeout):
            self._store.set_optimizer(optimizer)

    def send_command(self, body: str, what: str) -> None:
        """Sends every server a command (server_states.py) and waits until each ran it."""
        with self._watchdog.guard(what, self._timeout):
            self._store._send_command_to_servers(0, body)

    def push_pull(
        self, keys: Sequence, values: Sequence[mx.nd.NDArray], outs: Sequence[mx.nd.NDArray]
    ) -> None:
        """Pushes `values` (if any) and pulls into `outs` (if any, the same keys), then
        waits once; with both, pulls cross while later keys' pushes do (`outs` and
        `values` then arrays of their own, not views of one buffer, whose engine variable
        would make each push wait for every pull before it)."""
        what = " and ".join(w for w, arrays in (("push", values), ("pull", outs)) if arrays)
        with self._exchange(what, len(keys), _bytes(values), _bytes(outs)):
            if values and outs:
                self._push_then_pull_paced(keys, values, outs)
            elif values:
                self._store.push(list(keys), list(values))
            elif outs:
                self._store.pull(list(keys), out=list(outs))

    def push_pull_rows(
        self,
        keys: Sequence,
        values: Sequence[mx.nd.NDArray],
        outs: Sequence[mx.nd.NDArray],
        row_ids: Sequence[mx.nd.NDArray],
    ) -> None:
        """Keys the servers keep row_sparse: pushes `values` (row_sparse, if any) and, once
        the servers took them, pulls the rows `row_ids` (int64) of each key into `outs`
        (row_sparse, if any), as MXNet's dist store does (push, row_sparse_pull)."""
        what = " and ".join(w for w, arrays in (("push", values), ("row pull", outs)) if arrays)
        pushed = sum(_row_bytes(v.data.size, v.indices.size, v.dtype) for v in values)
        pulled = sum(
            _row_bytes(ids.size * int(np.prod(o.shape[1:])), ids.size, o.dtype)
            for o, ids in zip(outs, row_ids)
        )
        with self._exchange(what, len(keys), pushed, pulled):
            for key, value in zip(keys, values):
                self._store.push(key, value)
            for value in values:  # a CPU push ends when the servers took it
                check_call(_LIB.MXNDArrayWaitToWrite(value.handle))
            for key, out, ids in zip(keys, outs, row_ids):
                self._store.row_sparse_pull(key, out=out, row_ids=ids)

    def pull_then_push(
        self,
        keys: Sequence,
        outs: Sequence[mx.nd.NDArray],
        pushes: Callable[[List[int]], List[mx.nd.NDArray]],
    ) -> None:
        """Pulls the keys into `outs` and pushes, key for key, what `pushes(indices)` makes
        of a pulled batch (arrays shaped as `outs`), in batches of about PACE_BYTES: each
        batch's pushes cross the link while the pulls of the next BATCHES_AHEAD batches do
        (their requests went out before those pushes, or they would wait behind them)."""
        size = _bytes(outs)
        with self._exchange("pull and push", len(keys), size, size):
            batches = paced(outs)
            mx.nd.waitall()  # whatever `pushes` may read

            def pull(b: int) -> None:
                for i in batches[b] if b < len(batches) else []:
                    self._store.pull(keys[i], out=outs[i])

            for b in range(BATCHES_AHEAD):
                pull(b)
            for b, batch in enumerate(batches):
                for i in batch:
                    outs[i].wait_to_read()
                pull(b + BATCHES_AHEAD)
                for i, value in zip(batch, pushes(batch)):
                    self._store.push(keys[i], value)

    @contextmanager
    def _exchange(self, what: str, num_keys: int, pushed: int, pulled: int) -> Iterator[None]:
        """Bounds an exchange with the servers by the timeout, records it in the timeline
        and the traffic counters, and waits until its arrays are done."""
        started = time.monotonic()
        with self._watchdog.guard(
            f"{what} of {num_keys} keys through the parameter server", self._timeout
        ), timeline.span(f"parameter server {what}", "parameter server", keys=num_keys):
            yield
            mx.nd.waitall()
        self.bytes_pushed += pushed
        self.bytes_pulled += pulled
        if self._throttle is not None:
            self._throttle.wait_since(started, pushed + pulled)

    def _push_then_pull_paced(
        self, keys: Sequence, values: Sequence[mx.nd.NDArray], outs: Sequence[mx.nd.NDArray]
    ) -> None:
        """Pushes the keys in batches of about PACE_BYTES; once the servers acknowledged a
        batch, pulls it, then pushes the next, so that each batch's pulls cross the link
        while the next batch's pushes do. ps-lite sends a pull request down the connection
        that carries the pushes, behind every push issued before it: with every push
        issued first, no pull started before the last push had crossed (on 2 emulated
        hosts at 1000 Mbit/s, ResNet-18: the exchange took 684 ms, the link carrying one
        way at a time; paced: 512-558 ms)."""
        if len(values) != len(outs):
            raise ValueError(
                f"push_pull of {len(keys)} keys: {len(values)} values pushed "
                f"but {len(outs)} pulled; give both for every key, or one of them"
            )
        for batch in paced(values):
            for i in batch:
                self._store.push(keys[i], values[i])
            for i in batch:  # a CPU push ends when the servers acknowledge it
                check_call(_LIB.MXNDArrayWaitToWrite(values[i].handle))
            for i in batch:
                self._store.pull(keys[i], out=outs[i])

    def barrier(self) -> None:
        """Waits until every group leader reached its barrier (ps-lite's worker barrier)."""
        with self._watchdog.guard("a barrier with the other groups' leaders", self._timeout):
            self._store._barrier()

    def close(self) -> None:
        """Leaves ps-lite (a barrier with the other leaders and the servers, unless the
        groups are separate jobs)."""
        with self._watchdog.guard("closing the parameter-server connection", self._timeout):
            del self._store


def _bytes(arrays: Sequence[mx.nd.NDArray]) -> int:
    return sum(a.size * np.dtype(a.dtype).itemsize for a in arrays)


def _row_bytes(values: int, rows: int, dtype) -> int:
    """Bytes of `values` elements of `dtype` in `rows` rows, each row sent with its key."""
    return values * np.dtype(dtype).itemsize + rows * np.dtype(np.uint64).itemsize


_shared: Dict[str, Any] = {"server": None, "users": 0, "closed": False}


def acquire(
    kind: str,
    num_servers: int,
    timeout: float,
    who: str,
    on_timeout: Callable[[], None],
    throttle: Optional[LinkThrottle] = None,
    separate_groups: bool = False,
    rejoining: bool = False,
) -> ParameterServer:
    """This process's ParameterServer, connected on first use. `who` names this process in
    messages; `on_timeout` ends the job when the server does not answer within `timeout`;
    `throttle` emulates a slow link to it; `separate_groups`: the groups are separate MPI
    jobs (leaving does not wait for the other leaders); `rejoining`: this is a restarted
    group's leader, whose keys the servers hold."""
    if _shared["closed"]:
        raise ConfigError(
            "this process already left the parameter server (every hybrid store "
            "was closed); ps-lite cannot join again: create the stores before "
            "closing the last one"
        )
    if _shared["server"] is None:
        _shared["server"] = ParameterServer(
            kind,
            num_servers,
            timeout,
            Watchdog(on_timeout, who),
            throttle,
            separate_groups,
            rejoining,
        )
        tell_launcher_met(read_knob("MXKV_LAUNCHER_LINK"))
    elif _shared["server"].kind != kind:
        raise ConfigError(
            f"this process is connected to a {_shared['server'].kind} parameter "
            f"server and cannot open a {kind} one (one ps-lite store per process)"
        )
    _shared["users"] += 1
    return _shared["server"]


def connect_leader(kind: str, config, world, groups) -> Optional[ParameterServer]:
    """Checks the DMLC_* set-up on every rank; on a group leader returns this process's
    connection (dist_sync or dist_async), elsewhere None. Users call release() once."""
    num_servers = check_environment(config.mode, groups.num_groups)
    if not groups.is_leader:
        return None
    nodes = read_knob("MXKV_PS_NODES")
    if nodes and _shared["server"] is None:  # behind relays, before this process's ps-lite
        # starts: this leader's loopback address and port (ps/node_addresses)
        table = PsNodes.from_json(nodes)
        # a group job started again gets a port of its own; one MPI job gets a new table
        where = table.leader(groups.group_index, 0 if world.spans_all_ranks else config.attempt)
        try:
            check_free(where, f"rank {world.rank}, the leader of group {groups.group_index},")
        except OSError as err:
            raise ConfigError(err.strerror) from None
        os.environ.update({"DMLC_NODE_HOST": where.host, "PORT": str(where.port)})
    return acquire(
        kind,
        num_servers,
        config.ps_timeout,
        f"rank {world.rank} (leader of group {groups.group_index})",
        end_job,
        link_throttle(config),
        separate_groups=not world.spans_all_ranks,
        rejoining=config.rejoin and not world.spans_all_ranks,
    )


def traffic() -> Tuple[int, int]:
    """(bytes pushed, bytes pulled) by this process through the parameter server so far."""
    server = _shared["server"]
    return (server.bytes_pushed, server.bytes_pulled) if server is not None else (0, 0)


def barrier_across_groups() -> None:
    """On a group leader: waits for the other groups' leaders (elsewhere: nothing)."""
    if _shared["server"] is not None:
        _shared["server"].barrier()


def release() -> None:
    """Called by each user once; the last one leaves ps-lite."""
    _shared["users"] -= 1
    if _shared["users"] == 0 and _shared["server"] is not None:
        server, _shared["server"], _shared["closed"] = _shared["server"], None, True
        server.close()
