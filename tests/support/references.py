"""Single-process reference runs of the workers (no MPI job): what a job's weights are
compared with."""

import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Sequence, Tuple

import numpy as np
import pytest

from support.jobs import JOB_TIMEOUT
from support.paths import WORKERS


def start_reference(script: str, *args: str) -> subprocess.Popen:
    """A worker started as one plain process (no MPI job), its output piped."""
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
