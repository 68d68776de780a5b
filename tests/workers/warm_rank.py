"""A warm rank: one rank of a job that tests/support/warm_ranks.py keeps for many tests.
MXNet, mpi4py and the package are imported once; then the rank runs one worker script
after another, each as `mxkv_hybrid.run` runs a script (runpy, `__main__`, the script's
folder first on sys.path), with the test's knobs in os.environ for that script only,
MXNet's name counters fresh (a Gluon block is named `dense0` as in a new process) and the
repository's modules it imported (workers' and examples' helpers) forgotten after it.

argv: FOLDER. Tasks come as JSON on the FIFO FOLDER/rank<r> (null: leave); each script's
output is framed by the lines `WARM-BEGIN <id>` and `WARM-END <id> <exit status>`, written
to both streams (mpiexec forwards each on its own, in its own order)."""

import json
import os
import runpy
import sys
import traceback
from typing import Any, Dict, Set

import mxnet as mx

import mxkv_hybrid  # noqa: F401  (the store registered, as every worker has it)
from mxkv_hybrid.comm.topology import world
from mxkv_hybrid.run import exit_status

REPOSITORY = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PACKAGE = os.path.join(REPOSITORY, "mxkv_hybrid")


def forget_helpers(before: Set[str]) -> None:
    """Drops the modules of the repository outside the package that the task imported, so
    that the next task starts them afresh (their counters and caches)."""
    for name in set(sys.modules) - before:
        path = getattr(sys.modules[name], "__file__", None) or ""
        if path.startswith(REPOSITORY) and not path.startswith(PACKAGE):
            del sys.modules[name]


def run(task: Dict[str, Any]) -> int:
    """Runs the task's script to its end; its exit status (1 where it raised)."""
    script = task["script"]
    saved_environment, saved_path, modules = dict(os.environ), list(sys.path), set(sys.modules)
    os.environ.update(task["env"])
    sys.argv = [script, *task["args"]]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    mx.name.NameManager._current.value = mx.name.NameManager()
    try:
        runpy.run_path(script, run_name="__main__")
        return 0
    except SystemExit as stop:
        return exit_status(stop.code)
    except BaseException:  # noqa: BLE001  (printed, as Python prints a script's exception)
        traceback.print_exc()
        return 1
    finally:
        os.environ.clear()
        os.environ.update(saved_environment)
        sys.path[:] = saved_path
        forget_helpers(modules)


def mark(line: str) -> None:
    for stream in (sys.stdout, sys.stderr):
        print(line, file=stream, flush=True)


def main() -> None:
    fifo = os.path.join(sys.argv[1], f"rank{world().rank}")  # (MPI started as a rank starts it)
    while True:
        with open(fifo) as tasks:  # blocks until the test writes the next task
            task = json.loads(tasks.read())
        if task is None:
            return
        mark(f"WARM-BEGIN {task['id']}")
        mark(f"WARM-END {task['id']} {run(task)}")


if __name__ == "__main__":
    main()
