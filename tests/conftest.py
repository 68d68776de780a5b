"""Helpers for tests that start real MPI jobs through mxkv-launch, and the fast tier:
`pytest -m unit` runs the tests that start no process (no MPI job, server, relay or
emulated host), found by reading each test's code and what it calls."""

import inspect
import os
import re
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np
import pytest

from mxkv_hybrid.launch.processes import live_processes
from mxkv_hybrid.testing.cluster import Cluster

WORKERS = Path(__file__).parent / "workers"
EXAMPLES = Path(__file__).parent.parent / "examples"
TINY_IMAGENET_CLASSES = 10  # 64 training and 16 validation images each, 32 x 32 pixels
JOB_TIMEOUT = 180  # seconds; a hard bound on every multi-process test
JOB_TAG = "PYTEST_MXKV_JOB"  # marks every process of one test job (not an MXKV_* knob)


# what starts a process, in a test's code or in the fixtures and test-module functions it uses
STARTS_PROCESSES = re.compile(
    r"\b(launch|start_job|launch_on|HostLauncher|run_reference|references|"
    r"Popen|subprocess|make_cluster|Cluster|run_ps_job|mpiexec)\b"
)
_unit_tier = False  # `-m unit`: a job started anyway is a misfiled test


def _code_of(function, seen: set) -> str:
    """The source of `function` and of the test-side functions it names, transitively."""
    if function in seen or not inspect.isfunction(function):
        return ""
    seen.add(function)
    try:
        text = inspect.getsource(function)
    except (OSError, TypeError):
        return ""
    names = set(re.findall(r"\b([A-Za-z_]\w*)\b", text))
    module = function.__globals__
    here = Path(__file__).parent
    for name in names:
        called = module.get(name)
        origin = getattr(getattr(called, "__code__", None), "co_filename", "")
        if origin.startswith(str(here)):
            text += _code_of(called, seen)
    return text


def starts_processes(item) -> bool:
    """Whether a collected test starts a process (its code, its fixtures' code)."""
    seen: set = set()
    text = _code_of(getattr(item, "obj", None), seen)
    for definitions in item._fixtureinfo.name2fixturedefs.values():
        text += _code_of(definitions[-1].func, seen)
    return bool(STARTS_PROCESSES.search(text))


def pytest_configure(config) -> None:
    global _unit_tier
    config.addinivalue_line("markers", "unit: starts no process (pytest -m unit, the fast tier)")
    _unit_tier = config.getoption("markexpr", "") == "unit"


def pytest_collection_modifyitems(config, items) -> None:
    """Marks the unit tier; leaves out the fault matrix's cells outside its CI sample
    (`fault_matrix(ci=False)`) unless the marker expression names `fault_matrix`
    (`pytest -m fault_matrix`: the whole matrix)."""
    whole_matrix = "fault_matrix" in (config.getoption("markexpr", "") or "")
    kept, left_out = [], []
    for item in items:
        if not starts_processes(item):
            item.add_marker(pytest.mark.unit)
        cell = item.get_closest_marker("fault_matrix")
        if cell is not None and not cell.kwargs["ci"] and not whole_matrix:
            left_out.append(item)
        else:
            kept.append(item)
    if left_out:
        config.hook.pytest_deselected(items=left_out)
        items[:] = kept


def refuse_in_the_unit_tier(what: str) -> None:
    if _unit_tier:
        raise RuntimeError(
            f"a test of the unit tier {what}: tests/conftest.py's "
            "STARTS_PROCESSES did not see it; name what starts it there"
        )


@dataclass
class Job:
    returncode: int
    output: str

    def lines_of(self, rank: int) -> List[str]:
        prefix = f"[{rank}] "
        return [line[len(prefix) :] for line in self.output.splitlines() if line.startswith(prefix)]


def processes_of(tag: str) -> List[int]:
    """Live processes whose environment carries JOB_TAG=tag: mpiexec, its proxies, the
    ranks and the parameter servers all inherit it, whatever session they run in."""
    marker = f"{JOB_TAG}={tag}".encode()
    found = []
    for pid in live_processes():
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if marker in f.read().split(b"\0"):
                    found.append(pid)
        except OSError:
            continue
    return found


def wait_for_line(
    lines: Callable[[], List[str]],
    pattern: str,
    seconds: float,
    ended: Callable[[], bool] = lambda: False,
) -> re.Match:
    """The first of `lines()` matching `pattern`, waited for up to `seconds` (less once
    `ended()`: no line will come)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for line in list(lines()):
            found = re.search(pattern, line)
            if found:
                return found
        if ended():
            break
        time.sleep(0.1)
    raise AssertionError(f"no line matching {pattern!r} in:\n" + "\n".join(lines()))


class OutputLines:
    """The lines a started process (stdout piped, text) writes, collected by a thread as
    they come, for tests that act while it runs."""

    def __init__(self, process: subprocess.Popen):
        self.process = process
        self.lines: List[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.process.stdout:
            self.lines.append(line.rstrip("\n"))

    def wait_for(self, pattern: str, seconds: float = 60) -> re.Match:
        """The first line matching `pattern`, waited for up to `seconds` (less if the
        process ended and all its output was read)."""
        return wait_for_line(
            lambda: self.lines,
            pattern,
            seconds,
            ended=lambda: self.process.poll() is not None and not self._reader.is_alive(),
        )

    def join_reader(self) -> None:
        self._reader.join(timeout=10)

    @property
    def output(self) -> str:
        return "\n".join(self.lines)


@dataclass
class RunningJob:
    process: subprocess.Popen
    tag: str
    timeout: float


def start_job(
    num_ranks: int,
    script: Optional[str],
    *args: str,
    env: Optional[Dict[str, str]] = None,
    timeout: float = JOB_TIMEOUT,
    launcher_options: Sequence[str] = (),
) -> RunningJob:
    """Starts `mxkv-launch -n N [options] -- python workers/script args` (script "-m":
    `python -m args`; None: no program, for --check), every process of it marked with a
    fresh JOB_TAG."""
    refuse_in_the_unit_tier("started an MPI job")
    if script is None:
        program = []
    else:
        target = ["-m"] if script == "-m" else [str(WORKERS / script)]
        program = ["--", "python", *target, *args]
    command = [
        sys.executable,
        "-m",
        "mxkv_hybrid.launch",
        "-n",
        str(num_ranks),
        "--timeout",
        str(timeout),
        *launcher_options,
        *program,
    ]
    tag = uuid.uuid4().hex
    full_env = job_environment()
    full_env.update(env or {})
    full_env[JOB_TAG] = tag
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=full_env
    )
    return RunningJob(process, tag, timeout)


def finish_job(job: RunningJob) -> Job:
    """Waits for the launcher (hard timeout) and checks that nothing of the job is left."""
    try:
        output, _ = job.process.communicate(timeout=job.timeout + 30)
    finally:
        if job.process.poll() is None:
            job.process.kill()
            job.process.wait()
        leftovers = processes_of(job.tag)
        for pid in leftovers:
            os.kill(pid, 9)
    assert not leftovers, f"processes left behind: {leftovers}"
    return Job(job.process.returncode, output)


# what a test's job must not inherit: other jobs' knobs, and a batch scheduler's hosts
# (mxkv-launch takes SLURM_* / PBS_NODEFILE as its host list when it gets no -H)
JOB_VARIABLES = ("MXKV_", "DMLC_", "PS_", "SLURM_", "PBS_")


def job_environment() -> Dict[str, str]:
    """This process's environment without JOB_VARIABLES."""
    return {k: v for k, v in os.environ.items() if not k.startswith(JOB_VARIABLES)}


def launch(num_ranks: int, script: Optional[str], *args: str, **options) -> Job:
    """Runs a job to the end: start_job + finish_job."""
    return finish_job(start_job(num_ranks, script, *args, **options))


def environment_of(pid: int) -> Dict[str, str]:
    with open(f"/proc/{pid}/environ", "rb") as f:
        pairs = [item.split(b"=", 1) for item in f.read().split(b"\0") if b"=" in item]
    return {k.decode(): v.decode(errors="replace") for k, v in pairs}


def start_reference(script: str, *args: str) -> subprocess.Popen:
    """A worker started as one plain process (no MPI job), its output piped."""
    refuse_in_the_unit_tier("started a worker process")
    return subprocess.Popen(
        [sys.executable, str(WORKERS / script), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def reference_outputs(processes: Sequence[subprocess.Popen]) -> List[str]:
    """The standard output of each started worker, each waited for under JOB_TIMEOUT; one
    that failed fails the test, and none is left running, whatever happens."""
    outputs = []
    try:
        for process in processes:
            out, err = process.communicate(timeout=JOB_TIMEOUT)
            assert process.returncode == 0, out + err
            outputs.append(out)
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()
    return outputs


def run_reference(script: str, *args: str) -> str:
    """Runs a worker as one plain process (no MPI job) and returns its output."""
    return reference_outputs([start_reference(script, *args)])[0]


class References:
    """Single-process reference runs of workers that write `--out DIR`/rank0.npz, each
    (script, arguments) run once a session: the tests (and parametrisations) that compare
    with the same reference share its weights, and the runs one test asks for together
    run side by side."""

    def __init__(self, root: Path):
        self._root = root
        self._started = 0  # runs started, for fresh --out directories
        self._out: Dict[Tuple[str, Tuple[str, ...]], Path] = {}  # the runs that succeeded

    def weights(self, script: str, *args: str) -> Dict[str, np.ndarray]:
        """Rank 0's arrays of `script --out DIR *args` run as one process."""
        return self.weights_of_each(script, args)[0]

    def weights_of_each(
        self, script: str, *argument_lists: Sequence[str]
    ) -> List[Dict[str, np.ndarray]]:
        """weights() of each argument list, the runs not made yet started together."""
        keys = [(script, tuple(args)) for args in argument_lists]
        missing = list(dict.fromkeys(key for key in keys if key not in self._out))
        out = {key: self._root / f"run{self._started + i}" for i, key in enumerate(missing)}
        self._started += len(missing)
        reference_outputs([start_reference(s, "--out", str(out[s, a]), *a) for s, a in missing])
        self._out.update(out)
        return [dict(np.load(self._out[key] / "rank0.npz")) for key in keys]


@pytest.fixture(scope="session")
def references(tmp_path_factory) -> References:
    return References(tmp_path_factory.mktemp("references"))


def convex_loss(output: str, kind: str = "group-final") -> float:
    """train_convex.py's first `kind` loss ('group-final' or 'consensus') in `output`, over
    its zero-weight loss."""
    scale = re.search(r"zero-weight loss ([0-9.]+)", output)
    found = re.search(rf"{kind} loss ([0-9.e-]+)", output)
    assert scale and found, output
    return float(found.group(1)) / float(scale.group(1))


CONVEX_STEPS = 200  # train_convex.py's steps in the tests of the exchange
# A loss of r times the zero-weight loss (0.5 |w*|^2 over the whole data set, whose
# features are independent with unit variance) is a weight error |w - w*| of sqrt(r) |w*|:
# this bound says the model learned every weight to within 3 % (the data's noise floor is
# 7e-6; a half alone, the control, stays above 0.4).
CONVEX_LEARNED = 1e-3


@pytest.fixture(scope="session")
def convex_halves_alone(tmp_path_factory) -> Dict[int, float]:
    """The control of train_convex.py --halves: for each half of the features, one process
    with no exchange trained CONVEX_STEPS on that half; its loss on the whole data set (the
    other half's weights as initialised) over the zero-weight loss."""
    return {
        half: convex_loss(
            run_reference(
                "train_convex.py",
                str(tmp_path_factory.mktemp(f"half{half}")),
                str(CONVEX_STEPS),
                "--alone",
                str(half),
            )
        )
        for half in (0, 1)
    }


def load_ranks(directory: Path, num_ranks: int) -> List[Dict[str, np.ndarray]]:
    return [dict(np.load(directory / f"rank{r}.npz")) for r in range(num_ranks)]


def assert_identical_across_ranks(weights: List[Dict[str, np.ndarray]]) -> None:
    for rank, mine in enumerate(weights[1:], start=1):
        assert mine.keys() == weights[0].keys()
        for name in mine:
            assert np.array_equal(mine[name], weights[0][name]), (
                f"{name}: rank {rank} differs from rank 0 (max |diff| "
                f"{np.abs(mine[name] - weights[0][name]).max():.3g})"
            )


def assert_matches_reference(mine: Dict[str, np.ndarray], reference: Dict[str, np.ndarray]) -> None:
    assert mine.keys() == reference.keys()
    for name in mine:
        np.testing.assert_allclose(
            mine[name],
            reference[name],
            rtol=1e-4,
            atol=1e-6,
            err_msg=f"{name} differs from the single-process reference",
        )


@pytest.fixture
def job_dir(tmp_path: Path) -> Path:
    return tmp_path


@pytest.fixture(scope="session")
def tiny_imagenet(tmp_path_factory) -> Path:
    """The tiny ImageNet of examples/make_tiny_imagenet.py (folder and RecordIO), made once."""
    out = tmp_path_factory.mktemp("tiny-imagenet")
    subprocess.run(
        [
            sys.executable,
            str(EXAMPLES / "make_tiny_imagenet.py"),
            "--out",
            str(out),
            "--classes",
            str(TINY_IMAGENET_CLASSES),
            "--size",
            "32",
        ],
        check=True,
        timeout=120,
    )
    return out


def assert_checks_passed(job: Job, num_ranks: int, expected: int) -> None:
    """A worker's `CHECK <name> ok|FAILED` lines: `expected` of them on every rank, all ok."""
    assert job.returncode == 0, job.output
    for rank in range(num_ranks):
        checks = [line for line in job.lines_of(rank) if line.startswith("CHECK")]
        assert len(checks) == expected, job.output
        assert all(line.endswith(" ok") for line in checks), "\n".join(checks)


def rank_files(directory: Path, ranks) -> Dict[int, Dict[str, np.ndarray]]:
    """Each rank's rank<r>.npz in `directory`."""
    return {r: dict(np.load(directory / f"rank{r}.npz")) for r in ranks}


def assert_same_on_every_rank(found: Dict[int, Dict[str, np.ndarray]], prefix: str) -> None:
    """The arrays named `prefix`... are equal, bit for bit, in every rank's file."""
    first = min(found)
    names = [n for n in found[first] if n.startswith(prefix)]
    assert names
    for rank, arrays in found.items():
        for name in names:
            assert np.array_equal(arrays[name], found[first][name]), (
                f"{name}: rank {rank} differs from rank {first}"
            )


def bytes_across(output: str) -> float:
    """KiB per step across groups, from the first summary line."""
    line = next(line for line in output.splitlines() if "summary" in line)
    figure = re.search(r"and ([\d.]+) KiB across groups", line)
    assert figure, line
    return float(figure.group(1))


@pytest.fixture
def make_cluster() -> Iterator[Callable[..., Cluster]]:
    """Emulated hosts (tests/emulated.py has the rest): make_cluster(hosts, rate_mbit=None,
    interfaces=None), a started cluster, removed after the test (and checked to have no
    process left in it)."""
    made: List[Cluster] = []

    def make(
        hosts: int, rate_mbit: Optional[float] = None, interfaces: Optional[Dict[str, str]] = None
    ) -> Cluster:
        cluster = Cluster(hosts, rate_mbit, interfaces)
        cluster.start()
        made.append(cluster)
        return cluster

    yield make
    for cluster in made:
        cluster.close()


def trained_weights(prefix: Path, epoch: int) -> dict:
    """The trained (arg:) parameters of a do_checkpoint file; BatchNorm statistics stay per rank."""
    import mxnet as mx  # (only where a test reads checkpoints)

    saved = mx.nd.load(f"{prefix}-{epoch:04d}.params")
    return {name: array.asnumpy() for name, array in saved.items() if name.startswith("arg:")}


def assert_checkpoints_identical(prefix: Path, epoch: int) -> None:
    rank0 = trained_weights(prefix, epoch)
    rank1 = trained_weights(Path(f"{prefix}-1"), epoch)  # do_checkpoint's per-rank prefix
    assert rank0.keys() == rank1.keys() and rank0
    for name in rank0:
        assert np.array_equal(rank0[name], rank1[name]), f"{name} differs between the ranks"
