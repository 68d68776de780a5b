"""Every MXKV_* knob: parsed and validated once, from the environment."""

import os
from dataclasses import dataclass
from typing import Any, Callable, Dict, Mapping, Optional, Sequence, Tuple

from .capabilities import ALLREDUCE, MODES, capabilities_of, modes_with
from .errors import ConfigError

ALGORITHMS = ("auto", "mpi", "ring", "rhd", "rd")
HIERARCHIES = ("auto", "on", "off")
TRANSPORTS = ("ps", "rma")
# MXKV_COMPRESS -> the MXNet dtype code float32 values travel in (-1: as they are); 1bit
# sends codes, in lasgd's model averages only (modes/quantised_changes.py)
COMPRESSIONS = {"none": -1, "fp16": 2, "bf16": 12, "1bit": -1}
LOG_LEVELS = ("debug", "info", "warning", "error")


def _parse_bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise ValueError("expected 1/0, true/false, yes/no or on/off")


def _choice(options):
    def parse(text: str) -> str:
        value = text.strip().lower()
        if value not in options:
            raise ValueError("expected one of: " + ", ".join(options))
        return value

    return parse


def _whole_number(low: int, high: Optional[int], expected: str):
    """A parser of integers in [low, high] (no upper bound when high is None)."""

    def parse(text: str) -> int:
        value = int(text)
        if value < low or (high is not None and value > high):
            raise ValueError("expected " + expected)
        return value

    return parse


def _parse_fraction(text: str) -> Optional[float]:
    if text.strip() == "":
        return None
    value = float(text)
    if not 0 < value < 1:
        raise ValueError("expected a number between 0 and 1 (exclusive)")
    return value


def _parse_optional_momentum(text: str) -> Optional[float]:
    if text.strip() == "":
        return None
    value = float(text)
    if not 0 <= value < 1:
        raise ValueError("expected a momentum from 0 to below 1, or empty for the rule")
    return value


def _parse_optional_bool(text: str) -> Optional[bool]:
    return None if not text.strip() else _parse_bool(text)


def _parse_optional_scale(text: str) -> Optional[float]:
    if text.strip() == "":
        return None
    return _positive(text)


def _parse_seconds(text: str) -> float:
    value = float(text)
    if value <= 0:
        raise ValueError("expected a positive number of seconds")
    return value


def _positive(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise ValueError("expected a number above 0")
    return value


def _non_negative(text: str) -> float:
    value = float(text)
    if value < 0:
        raise ValueError("expected a number >= 0")
    return value


def _parse_bucket_mb(text: str) -> float:
    value = float(text)
    if not 0.001 <= value <= 1024:
        raise ValueError("expected a size in MiB between 0.001 and 1024")
    return value


def _whole_numbers(fields: Sequence[str], names: Sequence[str], expected: str) -> Tuple[int, ...]:
    """['a=1', 'b=2'], ('a', 'b') -> (1, 2); ValueError naming `expected` when a field is
    missing, unknown or not a whole number."""
    try:
        values = dict(field.split("=", 1) for field in fields)
        found = tuple(int(values.pop(name)) for name in names)
    except (KeyError, ValueError):
        raise ValueError(f"expected {expected}") from None
    if values:
        raise ValueError(f"expected {expected}")
    return found


FAULT_ACTIONS = ("kill", "raise", "hang", "exit")


@dataclass(frozen=True)
class Fault:
    """What to do, on which rank, at which step (1-based)."""

    action: str
    rank: int
    step: int


def parse_fault(text: str) -> Optional[Fault]:
    """'' -> None; 'ACTION:rank=R:step=S' -> Fault; ValueError naming the expected form."""
    if not text.strip():
        return None
    expected = (
        f"ACTION:rank=R:step=S with ACTION one of {', '.join(FAULT_ACTIONS)}, "
        "e.g. kill:rank=1:step=5"
    )
    action, *fields = text.strip().lower().split(":")
    fault = Fault(action, *_whole_numbers(fields, ("rank", "step"), expected))
    if action not in FAULT_ACTIONS or fault.rank < 0 or fault.step < 1:
        raise ValueError(f"expected {expected}")
    return fault


@dataclass(frozen=True)
class GroupJob:
    """This process's group when every group is its own MPI job (mxkv-launch --group-jobs):
    group `group` of `groups`, whose MPI ranks 0, 1, ... are the job's ranks
    first_rank, first_rank + 1, ... of `ranks` in all. When group jobs share one host
    (mxkv-launch --group-size), its ranks are local ranks local_first, local_first + 1, ...
    of the host's local_ranks (which pick the GPUs); else None: the MPI job's own."""

    group: int
    groups: int
    first_rank: int
    ranks: int
    local_first: Optional[int] = None
    local_ranks: Optional[int] = None


GROUP_JOB_FIELDS = ("group", "groups", "first_rank", "ranks")
GROUP_JOB_HOST_FIELDS = ("local_first", "local_ranks")


def parse_group_job(text: str) -> Optional[GroupJob]:
    """'' -> None; 'group=G:groups=N:first_rank=F:ranks=R[:local_first=L:local_ranks=H]'
    -> GroupJob."""
    if not text.strip():
        return None
    expected = (
        "group=G:groups=N:first_rank=F:ranks=R[:local_first=L:local_ranks=H], e.g. "
        "group=1:groups=3:first_rank=2:ranks=6"
    )
    fields = text.strip().split(":")
    names = GROUP_JOB_FIELDS + (GROUP_JOB_HOST_FIELDS if "local_first=" in text else ())
    job = GroupJob(*_whole_numbers(fields, names, expected))
    if not 0 <= job.group < job.groups or not 0 <= job.first_rank < job.ranks:
        raise ValueError(f"expected {expected}")
    if (
        job.local_first is not None
        and job.local_ranks is not None  # (given together)
        and not 0 <= job.local_first < job.local_ranks
    ):
        raise ValueError(f"expected {expected}")
    return job


# MXKV_LASGD_OVERLAP's rule: lasgd's averages overlap the local steps while they land at
# most this many steps late (MXKV_TAU / MXKV_FRAGMENTS), and block beyond. Chosen from
# examples/defaults_sweep.py MXKV_LASGD_OVERLAP (results/defaults_sweep.json; the study's
# budgets) and from digits at the example's own (lr 0.1, batch 32;
# results/lasgd_overlap_example_budget), 4 ranks, seeds 42 1 2, on the lasgd mode's page:
# at tau 4 overlapped averages came within a point of allreduce; at tau 8 they did on the
# study's budgets but not on the example's (0.966, 0.965 with MXKV_OUTER, against 0.978
# and 0.982 blocking, allreduce 0.979); at 32 and 128 digits fell behind on both.
LASGD_OVERLAP_MAX_DELAY = 4


@dataclass(frozen=True)
class Knob:
    """One environment variable: its parser, default and one-line documentation; internal:
    set by mxkv-launch for the processes it starts, not by you."""

    parse: Callable[[str], Any]  # the value's type depends on the knob
    default: str
    doc: str
    internal: bool = False


KNOBS: Dict[str, Knob] = {
    "MXKV_MODE": Knob(
        _choice(MODES),
        ALLREDUCE,
        "How gradients are combined. allreduce: one MPI allreduce over all ranks. "
        "sync: allreduce inside each group, group leaders sum through MXNet's "
        "parameter server (dist_sync), which runs the optimizer as dist_sync does, "
        "then a broadcast inside each group. async: the "
        "same groups, asynchronous to each other: the servers (dist_async) hold "
        "the weights and apply each group's gradient as it arrives. easgd: elastic "
        "averaging SGD between groups through a centre variable on the parameter "
        "server. lasgd: every rank takes local steps; the models are averaged every "
        "MXKV_TAU steps by an allreduce that overlaps the next local steps.",
    ),
    "MXKV_TAU": Knob(
        _whole_number(1, None, "a whole number >= 1"),
        "4",
        "easgd: local steps between two elastic exchanges of a group with the "
        "centre variable on the parameter server. lasgd: local steps between two "
        "model averagings; beyond 16, `MXKV_LOCAL_LR_SCALE`'s rule lowers the local "
        "steps' learning rate.",
    ),
    "MXKV_EASGD_BETA": Knob(
        _parse_fraction,
        "0.9",
        "`easgd`: the moving rate beta = groups x alpha (the paper's 0.9), a bound "
        "on alpha: unless `MXKV_EASGD_ALPHA` is set, alpha = min(0.5, min(0.1, beta / "
        "groups) x max(1, MXKV_TAU / 16)), and at most beta / groups with "
        "`MXKV_EASGD_SYNC=1` (the easgd mode's page).",
    ),
    "MXKV_EASGD_ALPHA": Knob(
        _parse_fraction,
        "",
        "`easgd`: the elastic moving rate of each exchange (e = alpha (x - "
        "centre); x -= e; centre += e), between 0 and 1. Empty: the rule "
        "min(0.5, min(0.1, `MXKV_EASGD_BETA` / groups) x max(1, MXKV_TAU / 16)), "
        "and at most beta / groups with `MXKV_EASGD_SYNC=1`, which rank 0 prints "
        "at start (`mxkv_hybrid/modes/elastic_rate.py`): the paper's beta / "
        "groups, 0.45 for 2 groups, was short of allreduce on MNIST-1D in the "
        "sweep of `examples/defaults_sweep.py MXKV_EASGD_ALPHA`, and 0.1 over "
        "periods past 16 steps in the sweep of `MXKV_TAU easgd` (the easgd mode's "
        "page).",
    ),
    "MXKV_EASGD_SYNC": Knob(
        _parse_bool,
        "0",
        "easgd: 0: each group exchanges with the centre on its own "
        "(asynchronous EASGD, dist_async servers); 1: all groups exchange at "
        "the same step and the centre moves by the sum of their elastic "
        "differences (synchronous EASGD, dist_sync servers).",
    ),
    "MXKV_TRANSPORT": Knob(
        _choice(TRANSPORTS),
        "ps",
        "easgd: where the centre variable lives. ps: on MXNet's parameter "
        "servers (mxkv-launch --servers), reached by ps-lite's push and pull. "
        "rma: in MPI windows on the group leaders (each holds 1/groups of it; "
        "no servers), read with MPI_Get_accumulate and moved with "
        "MPI_Accumulate, one-sided: the leaders that hold it take no part. rma "
        "needs every group in one MPI job (mxkv-launch without --servers). "
        "Other modes refuse rma.",
    ),
    "MXKV_RMA_PROGRESS_US": Knob(
        _whole_number(0, None, "a whole number of microseconds >= 0"),
        "500",
        "`easgd` over `rma`, leaders on more than one host: a thread of "
        "each leader enters MPI this often (microseconds), so the other "
        "leaders' reads and adds of the centre it holds move on while it"
        " computes (over TCP, MPICH serves one-sided operations only "
        "inside MPI). `0`: no thread.",
    ),
    "MXKV_WARMUP_STEPS": Knob(
        _whole_number(0, None, "a whole number >= 0"),
        "0",
        "`easgd`: steps of group-synchronous SGD before the first elastic "
        "exchange. `lasgd`: steps of synchronous SGD over all ranks before "
        "the first local step.",
    ),
    "MXKV_LASGD_OVERLAP": Knob(
        _parse_optional_bool,
        "",
        "`lasgd`: `1`: the average started at one averaging point is "
        "computed while the next `MXKV_TAU` steps run and applied at the "
        "next point (x += A - S); `0`: a blocking average (x = mean of x) "
        "at every point. Empty: the rule `MXKV_TAU / MXKV_FRAGMENTS <= "
        f"{LASGD_OVERLAP_MAX_DELAY}` (how many steps late an overlapped average "
        "lands), which rank 0 prints at start where it blocks: in the sweep of "
        "`examples/defaults_sweep.py MXKV_LASGD_OVERLAP`, and on digits at the "
        "example's learning rate from tau 8 on, an average that landed that late "
        "left the model short of allreduce's, where blocking did not (the lasgd "
        "mode's page). `1` needs MXNet's threaded engine "
        "(refused with `NaiveEngine`) and MPI_THREAD_MULTIPLE (mpi4py's default; "
        "refused with a `ConfigError` otherwise).",
    ),
    "MXKV_OUTER": Knob(
        _choice(("none", "nesterov", "sgd")),
        "none",
        "`lasgd`: an outer optimizer at each averaging point (DiLoCo, SlowMo): "
        "delta = anchor - mean(x) (the anchor: the model every rank shared at the "
        "last point, or after the warm-up), m = mu m + delta, anchor -= lr (delta "
        "+ mu m) (`nesterov`) or lr m (`sgd`); every rank goes on from the new "
        "anchor. With `MXKV_LASGD_OVERLAP=1` the outer step is taken when the "
        "average arrives, at the next point, and every rank keeps the local "
        "progress made meanwhile: x += new anchor - snapshot. `none`: plain "
        "averaging. `easgd` (either transport, sync or async): the centre is the "
        "outer model and each leader sends it lr (e + mu m) instead of its elastic"
        " difference e, m = mu m + e its own momentum; the momentum is linear, so "
        "with `MXKV_EASGD_SYNC=1` the centre takes exactly the outer step of the "
        "sum of the groups' e, and asynchronous groups each give their own moves "
        "momentum (x + c is then no longer conserved). Other modes are refused "
        "(`ConfigError`). The anchor and m (easgd: each leader's m) are in the "
        "checkpoint. Tested step by step against numpy (`tests/jobs/test_lasgd.py`, "
        "`tests/jobs/test_easgd.py`).",
    ),
    "MXKV_FRAGMENTS": Knob(
        _whole_number(1, None, "a whole number >= 1"),
        "1",
        "`lasgd`: Streaming DiLoCo's partial averages. The weights, read in "
        "key order as one vector, are cut into this many ranges of equal "
        "element counts (a weight may be split between two); there is an "
        "averaging point every `MXKV_TAU / MXKV_FRAGMENTS` steps, and point n "
        "averages fragment (n - 1) mod P only, so each fragment is still "
        "averaged every `MXKV_TAU` steps and each exchange sends 1/P of the "
        "model. Works with `MXKV_OUTER` (each piece has its own outer "
        "momentum) and with `MXKV_LASGD_OVERLAP=1` (a fragment's average is "
        "applied at the next point, `MXKV_TAU / P` steps later). `MXKV_TAU` "
        "must be a multiple of it; other modes are refused. "
        "`PeriodicModelAverager(..., fragments=P)` does the same.",
    ),
    "MXKV_OUTER_LR": Knob(
        _positive,
        "0.7",
        "The outer optimizer's learning rate, above 0 (DiLoCo's 0.7). With"
        " `1` and momentum `0` the outer step is plain averaging. Chosen by "
        "`examples/defaults_sweep.py MXKV_OUTER_LR` (lasgd's defaults, the momentum "
        "its rule; digits and MNIST-1D, tau 8 to 128, 3 seeds): 1, 0.7 and 0.5 within "
        "a point of allreduce in every row, 0.3 short on digits at tau 128 (the "
        "lasgd mode's page).",
    ),
    "MXKV_OUTER_MOMENTUM": Knob(
        _parse_optional_momentum,
        "",
        "The outer optimizer's momentum mu, from 0 to below 1. Empty: the rule "
        "mu = max(0, 1 - MXKV_OUTER_LR) (0.3 at the default lr), which rank 0 "
        "prints at start: Nesterov's steady step is lr / (1 - mu) times the "
        "averaged change, 1 by this rule, as plain averaging's. DiLoCo's 0.9 "
        "(a 7x step at lr 0.7) diverged in the sweep of "
        "`examples/defaults_sweep.py MXKV_OUTER_MOMENTUM` (lasgd's defaults; digits "
        "and MNIST-1D, tau 8 to 128, 3 seeds) at tau 8 on both tasks and at every "
        "tau on MNIST-1D. The rule's 0.3 was within a point of allreduce in every "
        "row (the lasgd mode's page).",
    ),
    "MXKV_LOCAL_LR_SCALE": Knob(
        _parse_optional_scale,
        "",
        "`lasgd`, `easgd`: the local steps take the gradients (each rank's in lasgd, "
        "each group's sum in easgd) times this (above 0), which under SGD, with or "
        "without momentum, scales the script's learning rate (weight decay and lasgd's "
        "warm-up keep theirs; Adam's steps do not depend on it). Empty: the rule "
        "sqrt(max(1 / M, min(1, P / MXKV_TAU))) for M local models (lasgd: the ranks, "
        "P 16; easgd: the groups, P 48: the centre's pull keeps them closer), which "
        "rank 0 prints at start where it is not 1: the square-root scaling rule from "
        "the batch of all ranks, which the script's learning rate is set for, to the "
        "batch a local model trains on over a period longer than P steps "
        "(`mxkv_hybrid/modes/local_lr_scale.py`). In the "
        "sweep of `examples/defaults_sweep.py MXKV_LOCAL_LR_SCALE` the script's "
        "learning rate (1) fell 5 to 22 points short of allreduce on MNIST-1D at "
        "MXKV_TAU 32 to 128 (the lasgd mode's page); easgd at tau 128 ended at chance "
        "with 4 groups (the easgd mode's page). `PeriodicModelAverager` leaves the "
        "gradients alone.",
    ),
    "MXKV_ASYNC_DAMPING": Knob(
        _choice(("auto", "none", "staleness", "momentum", "rate")),
        "auto",
        "`async`: `auto` (the default) is `rate` where the optimizer has a "
        "momentum above 0 and `none` where it has none (plain SGD, Adam: as "
        "MXNet's `dist_async`), which group 0 says at start. `rate`: G groups "
        "each push the mean gradient of 1/G of a step's batch, so the servers' "
        "optimizer runs with momentum m' where 1 - m' = G (1 - m): heavy-ball "
        "SGD's rate lr / (1 - m) kept per sample (the linear scaling rule; 0.8 "
        "for 2 groups at the script's 0.9, 0.6 for 4; from 1 / (1 - m) groups "
        "on m' is 0 and each push is scaled by 1 / (G (1 - m)); a learning-rate"
        " schedule advances one step per G pushes; "
        "`mxkv_hybrid/modes/async_momentum.py`). `momentum`: the servers' "
        "momentum less 1 - 1/G (never below 0: the momentum asynchrony adds, "
        "Mitliagkas et al. 2016). Both refuse an optimizer without momentum. "
        "`staleness` damps each group's gradient by 1 / (1 + s) before its "
        "leader pushes it, s the updates of other groups the servers applied "
        "since that leader last read the weights (the servers' push counter, "
        "read just before the push: one small round trip more a step). `none`: "
        "every gradient applied as it is, as MXNet's `dist_async` does. The "
        "default is chosen from the sweep of `examples/defaults_sweep.py "
        "MXKV_ASYNC_DAMPING` (the async mode's page: digits and MNIST-1D, 2 and"
        " 4 groups, 3 seeds). Other modes refuse every value but `auto` and "
        "`none`. Tested with a deliberately stale push "
        "(`tests/jobs/test_training_async.py`), with and without momentum.",
    ),
    "MXKV_GROUP_SIZE": Knob(
        _whole_number(0, None, "0 (one group per host) or a positive number of ranks"),
        "0",
        "Ranks per group: `0` puts the ranks of one host in one group; N "
        "makes groups of N consecutive ranks (the last may be smaller). Modes"
        " `sync`, `async` and `easgd` join the groups through the parameter "
        "server; in modes `allreduce` and `lasgd` the groups are where the "
        "slow link runs (`MXKV_HIERARCHY`, `MXKV_THROTTLE_*`, the summary's "
        "bytes across groups). `mxkv-launch --group-size` sets it.",
    ),
    "MXKV_GROUP_JOB": Knob(
        parse_group_job,
        "",
        "Set by `mxkv-launch` (modes `async`/`easgd` by default, `--group-"
        "jobs`, `--join`) for each group's own MPI job: "
        "`group=G:groups=N:first_rank=F:ranks=R` (which group, which of all "
        "ranks it holds), with `:local_first=L:local_ranks=H` when the group "
        "jobs share one host (`--group-size`): its ranks are local ranks L, "
        "L+1, ... of the host's H, so they pick distinct GPUs. Modes `sync`, "
        "`async` and asynchronous `easgd`. Empty: one MPI job holds every "
        "rank.",
        internal=True,
    ),
    "MXKV_REJOIN": Knob(
        _parse_bool,
        "0",
        "Set by `mxkv-launch --restarts` on a lost group's restart once the groups "
        "had met at the parameter server: `1`: its leader rejoins the servers' "
        "model (creates no key, sends no optimizer, reads its steps done); `0`: "
        "it starts as on its first start (a group lost while the groups were "
        "still starting, before the servers held anything of it).",
        internal=True,
    ),
    "MXKV_ATTEMPT": Knob(
        _whole_number(0, None, "a whole number >= 0"),
        "0",
        "Set by `mxkv-launch --restarts`: `0` for the first start, k for the "
        "k-th restart of the job (or, where each group is its own MPI job, of a "
        "lost group, whose leader then rejoins the servers' model). `MXKV_FAULT`"
        " fires only in attempt 0.",
        internal=True,
    ),
    "MXKV_PS_TIMEOUT": Knob(
        _parse_seconds,
        "60",
        "Seconds a group leader waits for the parameter server (connecting, "
        "or one push/pull) before it ends the job with an error naming what "
        "it waited for. With `--group-jobs`: also how long a finished group "
        "waits at `consensus` for groups that make no progress and that its "
        "launcher has not given up.",
    ),
    "MXKV_HIERARCHY": Knob(
        _choice(HIERARCHIES),
        "auto",
        "Mode `allreduce`: `on`: hierarchical allreduce (ring reduce-scatter "
        "inside each group, an allreduce of each 1/g slice across groups among"
        " the ranks that hold it, ring allgather inside the group), so the "
        "link between groups carries about one model per group instead of one "
        "per rank pair that straddles it; `off`: one flat allreduce over all "
        "ranks; `auto`: on when the ranks form more than one group "
        "(`MXKV_GROUP_SIZE`, or hosts) and all groups have the same size. `on`"
        " refuses groups of unequal size with a `ConfigError`. See "
        "Hierarchical allreduce.",
    ),
    "MXKV_THROTTLE_MBPS": Knob(
        _non_negative,
        "0",
        "Emulates a slow link between groups (for benchmarks and "
        "rehearsals on one machine). Each group has one full-duplex link "
        "to the other groups, shared by its ranks as a host's network card"
        " is (a shared-memory clock per direction, "
        "`csrc/shared_link_clock.h`); every transfer step across groups — "
        "one exchange of an allreduce algorithm with a rank of another "
        "group (mode `allreduce`, flat or hierarchical; lasgd's model "
        "average), a leader's parameter-server push and pull — takes at "
        "least latency + bytes / this many megabits per second, for the "
        "bytes that step really sends and receives, queued after what the "
        "group's other ranks put on the link. So each algorithm pays for "
        "its own traffic over the boundary. A transfer that overlaps "
        "computation (lasgd's average in flight) is only waited for when "
        "its result is used. `0`: off.",
    ),
    "MXKV_THROTTLE_LATENCY_MS": Knob(
        _non_negative,
        "0",
        "The emulated link's latency per transfer step across "
        "groups, in milliseconds (with `MXKV_THROTTLE_MBPS` > 0).",
    ),
    "MXKV_BUCKET_MB": Knob(
        _parse_bucket_mb,
        "1",
        "Fusion bucket size in MiB (0.001 to 1024): smaller arrays are packed "
        "together up to this size; larger ones are reduced whole, in place. 1 MiB "
        "measured fastest for the ResNet-50 set on 2 ranks (docs/performance/index.md).",
    ),
    "MXKV_ALGO": Knob(
        _choice(ALGORITHMS),
        "auto",
        "Allreduce algorithm: `ring`, `rhd` (recursive halving/doubling), `rd` "
        "(recursive doubling), `mpi` (MPI_Allreduce), or `auto`: chosen per bucket "
        "by size and rank count from the algorithm table (see Allreduce "
        "algorithms); the hierarchical allreduce's step across groups takes `ring` "
        "under `auto` (the table is measured on one machine, not across hosts); "
        "`lasgd`'s model averages take `ring` under `auto`: they "
        "run behind the local steps, so their bytes count and their latency "
        "does not, and the table's recursive doubling for small messages sends"
        " log2(P) times a fragment where the ring sends 2 (P - 1) / P times it.",
    ),
    "MXKV_ALGO_TABLE": Knob(
        str,
        "",
        "JSON algorithm table for `auto`, written by `python -m "
        "mxkv_hybrid.tune`. Empty: the table tune saved in "
        "`~/.cache/mxkv_hybrid/allreduce_table.json` if there is one, else "
        "the one shipped in the package. Rank 0's table is used on every "
        "rank.",
    ),
    "MXKV_COMPRESS": Knob(
        _choice(tuple(COMPRESSIONS)),
        "none",
        "`fp16` or `bf16`: float32 gradients travel in 16 bits and are summed "
        "in float32 (half the bytes). Other dtypes travel as they are. Not with"
        " `MXKV_ALGO=mpi`. In `lasgd` the model averages (as Streaming DiLoCo's"
        " outer gradients) send each rank's change since the model all ranks "
        "last shared, d = anchor - x + r, rounded to 16 bits on the wire, with "
        "error feedback (r = d - round(d) goes out with the next change; "
        "`modes/rounded_deltas.py`; `consensus` averages the same way): the "
        "rounding is relative to the change, not to the weight (bf16 rounds a "
        "weight near 100 by up to 0.25). It keeps one more copy of the model "
        "and one of the residual; the residual is in the checkpoint. `1bit` "
        "(lasgd only): each average sends the changes in 1-bit SGD's codes, a "
        "sign a value and the mean of each sign per 256 values (1.25 bits a "
        "value, 25.6x fewer bytes than float32), with error feedback; every "
        "rank gathers the codes and sums them (`modes/quantised_changes.py`). "
        "The average blocks (with MXKV_LASGD_OVERLAP=1 it is still applied at "
        "the next point); `consensus` averages the same way.",
    ),
    "MXKV_OVERLAP": Knob(
        _parse_bool,
        "0",
        "`1`: in mode `allreduce`, each gradient bucket becomes an MXNet engine "
        "operation that starts as soon as backward has written its gradients, "
        "while backward goes on; one communication thread runs the buckets in "
        "the same order on every rank. Same numbers as `0` (tested bitwise). "
        "Needs MPI_THREAD_MULTIPLE (mpi4py's default; a lower level, e.g. "
        "`MPI4PY_RC_THREAD_LEVEL=serialized`, gets a `ConfigError` when the "
        "store is created) and MXNet's threaded engine.",
    ),
    "MXKV_SEGMENT_KB": Knob(
        _whole_number(4, 65536, "a size in KiB between 4 and 65536"),
        "1024",
        "Segment size in KiB (4 to 65536) of the `ring`/`rhd`/`rd` "
        "algorithms: every message is cut into segments this large, two in "
        "flight, each reduced while it is in cache.",
    ),
    "MXKV_AUTO": Knob(
        _parse_bool,
        "0",
        "1 (set by `mxkv-launch --auto`): for scripts with no kvstore flag, the "
        "stores 'local' and 'device' (the Trainer's and Module.fit's defaults) "
        "become 'hybrid', a shuffled mx.io.ImageRecordIter and a "
        "gluon.data.DataLoader(shuffle=True) read one shard per rank; unshuffled "
        "(validation) data stays whole; a script argument --gpus LIST becomes "
        "the rank's share of LIST. Each change is logged once by rank 0.",
    ),
    "MXKV_LOST_SECONDS": Knob(
        _parse_seconds,
        "4.5",
        "The bound on noticing a lost host. `mxkv-launch` keeps a link with"
        " every rank (a TCP connection each, a heartbeat every half second "
        "each way, kept on the rank's side by a small keeper process that "
        "the rank's work cannot starve); a rank it has not heard from for "
        "this long is lost: its group job is ended and named with its host "
        "(async/easgd: the others train on; one MPI job: the job ends naming"
        " the host), and a rank that has not heard from its launcher for "
        "this long is ended by its keeper, so nothing is left running on a "
        "cut-off host. The default, 4.5 s, is the longest pause a host rides "
        "out (3 s stopped: a long GC, a swap storm) plus one heartbeat (0.5 s) "
        "plus 1 s for a loaded machine's scheduling, so a host stopped for 3 s"
        " is not lost, and one cut off or dead is named within 5 s. Ranks on "
        "other hosts that never call within this time, or 15 s if longer, "
        "after their job started count as lost too. With "
        "`--serve` / `--join`, the serving launcher and each joined group's "
        "launcher beat on their rendezvous connection: a group not heard from"
        " this long is named lost (`group 2 (2 rank(s), joined from "
        "198.18.7.13) was last heard from 5 s ago ...`; sync: the others are"
        " stopped), and a joined launcher that has not heard from the serving"
        " one this long stops its group. The relays' connections between "
        "hosts fail after this long unacknowledged (TCP_USER_TIMEOUT).",
    ),
    "MXKV_HOST_RETURN_SECONDS": Knob(
        _parse_seconds,
        "30",
        "How long a lost group's host has to answer again once the group's "
        "restart (`--restarts`) is due: the launcher waits until the host's "
        "relay answers (a healed link) and then starts the group; a host that"
        " has not answered within this time is given up (`... is not "
        "restarted: its host did not come back within 30 s ...; the other "
        "groups go on`).",
    ),
    "MXKV_LAUNCHER_LINK": Knob(
        str,
        "",
        "Set by mxkv-launch: TOKEN@HOST:PORT of its link with every rank "
        "(heartbeats both ways, launch/control/link.py).",
        internal=True,
    ),
    "MXKV_PS_NODES": Knob(
        str,
        "",
        "Set by `mxkv-launch` when relays carry ps-lite between hosts: where "
        "every ps-lite node listens (JSON, `ps/node_addresses.py`); a group "
        "leader takes its address and port from it.",
        internal=True,
    ),
    "MXKV_STALL_TIMEOUT": Knob(
        _non_negative,
        "30",
        "Seconds a rank waits for the others in one collective before it "
        "asks every rank where it is, prints the answers (waiting, "
        "working, finished, no answer) and ends the job. Raise it when a "
        "rank legitimately works alone longer (rank-0-only evaluation); "
        "0: wait for ever.",
    ),
    "MXKV_CHECK_FINITE": Knob(
        _parse_bool,
        "0",
        "`1`: before each `pushpull` combines anything, the ranks check "
        "their values for NaN/Inf (one `multi_all_finite` over the arrays, "
        "one 4-byte allreduce); if any rank has one, every rank raises "
        "`NonFiniteError` naming the first key per rank, and nothing is "
        "combined or updated.",
    ),
    "MXKV_FAIL_ON_DIVERGENCE": Knob(
        _parse_bool,
        "0",
        "Rank 0's divergence guard (`mxkv_hybrid/safety/divergence_guard.py`) "
        "reads the loss each Gluon backward starts from (its mean, one step "
        "late); when the median of 10 steps, having fallen below half of the "
        "first such median, climbs back above 90 % of it, or a loss is NaN/Inf, "
        "it says once which knob of the mode to change. `0`: the run goes on; "
        "`1`: rank 0 raises `DivergenceError` and mxkv-launch stops the job. "
        "Module jobs have no loss head and are not watched.",
    ),
    "MXKV_TIMELINE": Knob(
        str,
        "",
        "`path.json`: every rank records its collectives, each bucket's pack, "
        "allreduce (algorithm, bytes) and unpack, the parameter-server "
        "exchanges and the elastic exchanges, on one clock; `mxkv-launch` "
        "merges them into this Chrome-trace file when the job ends (see "
        "Timeline). Kept in memory until exit: record short runs.",
    ),
    "MXKV_SUMMARY_EVERY": Knob(
        _whole_number(0, None, "a whole number of steps, 0 for off"),
        "0",
        "k > 0: every k steps (one `pushpull` each) the first rank of the "
        "ranks that step together prints one line: compute and "
        "communication time a step (means over ranks), bytes sent inside "
        "groups and across groups, the slowest and fastest rank's compute "
        "time (see Step summary). `0`: off.",
    ),
    "MXKV_LOG_LEVEL": Knob(
        _choice(LOG_LEVELS),
        "info",
        "Which of the package's messages (progress, notices, warnings of the "
        "launcher and the ranks) are shown: `debug`, `info`, `warning` or "
        "`error`, the level of the `mxkv_hybrid` logger, read at `import "
        "mxkv_hybrid`; `mxkv-launch --log-level` sets it for the launcher and "
        "every rank. Each message keeps its stream (progress on stdout, the "
        "launcher's notices and every warning on stderr); to keep them in a "
        'file too, add a handler to `logging.getLogger("mxkv_hybrid")` (see '
        "`mxkv_hybrid/logs.py`). Reports asked for (`--check`, `--dry-run`, "
        "the step summary, `plan` and `tune`) are printed at every level.",
    ),
    "MXKV_FAULT": Knob(
        parse_fault,
        "",
        "Rehearses a failure: `ACTION:rank=R:step=S` makes rank R, at its S-th "
        "`pushpull` (one per training step), `kill` itself (SIGKILL, like the out-"
        "of-memory killer), `raise` an exception, `hang` for ever, or `exit` (its "
        "script ends there with status 0, like a rank that finished early).",
    ),
    "MXKV_AVERAGE": Knob(
        _parse_bool,
        "1",
        "How the Trainer and Module hooks combine the ranks' gradients. `1`: "
        "averaged (a script written for one process trains on the union of the "
        "batches; Module's result with `dist_sync`, Horovod's convention). `0`: "
        "summed (gluon.Trainer's with `dist_sync`). The store's own calls "
        "(`kv.push`, `kv.pushpull`) always sum, as every MXNet store does.",
    ),
}


def read_knob(name: str, environ: Optional[Mapping[str, str]] = None) -> Any:
    """One knob's value (for the few read before a store exists, e.g. MXKV_AUTO at import)."""
    environ = os.environ if environ is None else environ
    knob = KNOBS[name]
    text = environ.get(name, knob.default)
    try:
        return knob.parse(text)
    except ValueError as err:
        raise ConfigError(f"{name}={text!r} is invalid: {err}. {knob.doc}") from None


def launcher_mode(environ: Optional[Mapping[str, str]] = None) -> str:
    """MXKV_MODE as mxkv-launch reads it: unchecked, so that a bad value reaches the ranks,
    which refuse it on every rank, naming the modes (capabilities.UNKNOWN_MODE)."""
    environ = os.environ if environ is None else environ
    return environ.get("MXKV_MODE", KNOBS["MXKV_MODE"].default).strip().lower()


def knob_is_set(name: str, environ: Optional[Mapping[str, str]] = None) -> bool:
    """Whether the knob `name` is set (to anything) rather than left to its default."""
    return name in (os.environ if environ is None else environ)


def separate_groups_refusal(mode: str, easgd_sync: bool, transport: str = "ps") -> str:
    """Why the groups of `mode` cannot run as separate MPI jobs ('' when they can): they
    meet only through the parameter server, in the modes with group_jobs (capabilities.py),
    easgd asynchronous. The one rule of the launcher and of every rank."""
    can = capabilities_of(mode)
    if can.rma_transport and transport == "rma":
        return (
            "MXKV_TRANSPORT=rma keeps easgd's centre variable in MPI windows of the group "
            "leaders, which only ranks of one MPI job can reach"
        )
    if can.group_jobs and not (can.easgd_sync and easgd_sync):
        return ""
    return (
        f"MXKV_MODE={mode}{' with MXKV_EASGD_SYNC=1' if easgd_sync else ''} cannot run its "
        "groups as separate MPI jobs: they are joined through the parameter server only "
        f"in the modes {', '.join(modes_with('group_jobs'))} (easgd asynchronous)"
    )


@dataclass(frozen=True)
class Config:
    """The validated settings of one process."""

    mode: str
    bucket_bytes: int
    average: bool
    group_size: int
    ps_timeout: float
    algorithm: str
    algorithm_table: str
    compress: str
    segment_bytes: int
    overlap: bool
    tau: int
    easgd_beta: float
    easgd_alpha: Optional[float]
    warmup_steps: int
    easgd_sync: bool
    transport: str
    rma_progress_us: int
    lasgd_overlap: bool
    lasgd_overlap_by_rule: bool  # MXKV_LASGD_OVERLAP unset: LASGD_OVERLAP_MAX_DELAY decided
    outer: str
    outer_lr: float
    outer_momentum: Optional[float]  # None: outer_optimizer.rule_momentum(outer_lr)
    local_lr_scale: Optional[float]  # None: local_lr_scale.rule_scale(tau, local models)
    fragments: int
    async_damping: str
    hierarchy: str
    throttle_mbps: float
    throttle_latency_ms: float
    auto: bool
    fault: Optional[Fault]
    check_finite: bool
    fail_on_divergence: bool
    summary_every: int
    group_job: Optional[GroupJob]
    attempt: int
    rejoin: bool

    @classmethod
    def from_environment(cls, environ: Optional[Mapping[str, str]] = None) -> "Config":
        """Reads MXKV_* from `environ` (default os.environ); raises ConfigError naming the fix."""
        environ = os.environ if environ is None else environ
        unknown = sorted(k for k in environ if k.startswith("MXKV_") and k not in KNOBS)
        if unknown:
            raise ConfigError(
                f"unknown setting {', '.join(unknown)}; the known MXKV_* knobs are "
                f"{', '.join(KNOBS)} (see docs/reference/knobs.md). Unset or rename it."
            )
        values = {name: read_knob(name, environ) for name in KNOBS}
        if values["MXKV_ALGO"] == "mpi" and COMPRESSIONS[values["MXKV_COMPRESS"]] != -1:
            raise ConfigError(
                f"MXKV_COMPRESS={values['MXKV_COMPRESS']} needs one of this "
                "package's algorithms (MPI cannot sum 16-bit floats into float32): "
                "set MXKV_ALGO to auto, ring, rhd or rd, or MXKV_COMPRESS=none"
            )
        if values["MXKV_OVERLAP"] and environ.get("MXNET_ENGINE_TYPE") == "NaiveEngine":
            raise ConfigError(
                "MXKV_OVERLAP=1 reduces buckets behind MXNet's threaded engine, "
                "and MXNET_ENGINE_TYPE=NaiveEngine runs every operation at once: "
                "unset one of them"
            )
        can = capabilities_of(values["MXKV_MODE"])
        lasgd_overlap = values["MXKV_LASGD_OVERLAP"]
        if lasgd_overlap is None:
            lasgd_overlap = values["MXKV_TAU"] / values["MXKV_FRAGMENTS"] <= LASGD_OVERLAP_MAX_DELAY
        if (
            can.overlapped_average
            and lasgd_overlap
            and environ.get("MXNET_ENGINE_TYPE") == "NaiveEngine"
        ):
            chosen = "" if values["MXKV_LASGD_OVERLAP"] else " (its rule's choice here)"
            raise ConfigError(
                f"MXKV_LASGD_OVERLAP=1{chosen} averages behind MXNet's threaded "
                "engine, and MXNET_ENGINE_TYPE=NaiveEngine runs every operation at "
                "once: set MXKV_LASGD_OVERLAP=0 or unset MXNET_ENGINE_TYPE"
            )
        for knob, unset, capability in (
            ("MXKV_OUTER", "none", "outer_optimizer"),
            ("MXKV_FRAGMENTS", 1, "fragments"),
            ("MXKV_LOCAL_LR_SCALE", None, "local_lr_scale"),
        ):
            if values[knob] != unset and not getattr(can, capability):
                modes = reversed(modes_with(capability))  # the later modes first
                raise ConfigError(
                    f"{knob}={values[knob]} is built for MXKV_MODE="
                    f"{' or '.join(modes)}, and this job has MXKV_MODE="
                    f"{values['MXKV_MODE']}: unset {knob} or change the mode"
                )
        if values["MXKV_COMPRESS"] == "1bit" and not can.quantised_averages:
            quantising = " or ".join(modes_with("quantised_averages"))
            raise ConfigError(
                f"MXKV_COMPRESS=1bit quantises the model averages of MXKV_MODE="
                f"{quantising}, and this job has MXKV_MODE={values['MXKV_MODE']}: "
                "use fp16 or bf16, or quantise gradients with "
                "set_gradient_compression({'type': '1bit'})"
            )
        if values["MXKV_TAU"] % values["MXKV_FRAGMENTS"]:
            raise ConfigError(
                f"MXKV_FRAGMENTS={values['MXKV_FRAGMENTS']} averages one fragment "
                "every MXKV_TAU / MXKV_FRAGMENTS steps, and MXKV_TAU="
                f"{values['MXKV_TAU']} is not a multiple of it: make MXKV_TAU a "
                "multiple of MXKV_FRAGMENTS"
            )
        if values["MXKV_ASYNC_DAMPING"] not in ("none", "auto") and not can.async_damping:
            damped = " or ".join(modes_with("async_damping"))
            raise ConfigError(
                f"MXKV_ASYNC_DAMPING={values['MXKV_ASYNC_DAMPING']} damps the "
                f"stale gradients of MXKV_MODE={damped}, and this job has MXKV_MODE="
                f"{values['MXKV_MODE']}: unset MXKV_ASYNC_DAMPING"
            )
        if values["MXKV_TRANSPORT"] == "rma" and not can.rma_transport:
            rma_modes = " or ".join(modes_with("rma_transport"))
            raise ConfigError(
                f"MXKV_TRANSPORT=rma is built for MXKV_MODE={rma_modes} (its centre "
                f"variable), and MXKV_MODE is {values['MXKV_MODE']}: unset "
                f"MXKV_TRANSPORT or use MXKV_MODE={rma_modes}"
            )
        if values["MXKV_GROUP_JOB"] is not None:
            refusal = separate_groups_refusal(
                values["MXKV_MODE"], values["MXKV_EASGD_SYNC"], values["MXKV_TRANSPORT"]
            )
            if refusal:
                raise ConfigError(
                    f"MXKV_GROUP_JOB: {refusal}; use one of those, or start the "
                    "groups in one MPI job (drop --group-jobs)"
                )
        return cls(
            mode=values["MXKV_MODE"],
            bucket_bytes=int(values["MXKV_BUCKET_MB"] * 1024 * 1024),
            average=values["MXKV_AVERAGE"],
            group_size=values["MXKV_GROUP_SIZE"],
            ps_timeout=values["MXKV_PS_TIMEOUT"],
            algorithm=values["MXKV_ALGO"],
            algorithm_table=values["MXKV_ALGO_TABLE"],
            compress=values["MXKV_COMPRESS"],
            segment_bytes=values["MXKV_SEGMENT_KB"] * 1024,
            overlap=values["MXKV_OVERLAP"],
            tau=values["MXKV_TAU"],
            easgd_beta=values["MXKV_EASGD_BETA"],
            easgd_alpha=values["MXKV_EASGD_ALPHA"],
            warmup_steps=values["MXKV_WARMUP_STEPS"],
            easgd_sync=values["MXKV_EASGD_SYNC"],
            transport=values["MXKV_TRANSPORT"],
            rma_progress_us=values["MXKV_RMA_PROGRESS_US"],
            lasgd_overlap=lasgd_overlap,
            lasgd_overlap_by_rule=values["MXKV_LASGD_OVERLAP"] is None,
            outer=values["MXKV_OUTER"],
            outer_lr=values["MXKV_OUTER_LR"],
            outer_momentum=values["MXKV_OUTER_MOMENTUM"],
            local_lr_scale=values["MXKV_LOCAL_LR_SCALE"],
            fragments=values["MXKV_FRAGMENTS"],
            async_damping=values["MXKV_ASYNC_DAMPING"],
            hierarchy=values["MXKV_HIERARCHY"],
            throttle_mbps=values["MXKV_THROTTLE_MBPS"],
            throttle_latency_ms=values["MXKV_THROTTLE_LATENCY_MS"],
            auto=values["MXKV_AUTO"],
            fault=values["MXKV_FAULT"],
            check_finite=values["MXKV_CHECK_FINITE"],
            fail_on_divergence=values["MXKV_FAIL_ON_DIVERGENCE"],
            summary_every=values["MXKV_SUMMARY_EVERY"],
            group_job=values["MXKV_GROUP_JOB"],
            attempt=values["MXKV_ATTEMPT"],
            rejoin=values["MXKV_REJOIN"],
        )

    @property
    def compress_dtype(self) -> int:
        """MXNet dtype code float32 values travel in, or -1 (uncompressed)."""
        return COMPRESSIONS[self.compress]
