"""The README's main job (its first command), and the same real network trained in every mode and
transport on digits split by class between two halves of the ranks (even digits on the first half,
odd on the second): the model scores on all ten digits only if what each half learned crossed to the
other, so every test here fails when the exchange is gone. The control, in every test: one process
(kvstore 'local') on the even digits alone fails the same bound. After mxkv_hybrid.consensus every
rank of the job holds the same model."""

import os
import re
import subprocess
import sys

import pytest

from support.jobs import JOB_TIMEOUT
from support.paths import EXAMPLES

EXAMPLE = EXAMPLES / "train_digits.py"
TWO_GROUPS = ["--group-size", "1", "--servers", "1"]
EPOCHS = "8"
# A model that learned one half's five digits scores at most the share of the test set they
# make (about 0.52: the control reads 0.517, every even digit right); 0.7 needs at least 18 %
# of the test set, a third of the other half's digits, learned through the exchange.
BOUND = 0.7
EASGD_SYNC = {"MXKV_EASGD_SYNC": "1", "MXKV_EASGD_ALPHA": "0.45"}  # (see the easgd cells)


def final_accuracy(output: str) -> re.Match:
    final = re.search(
        r"\[0\] final test accuracy ([0-9.]+) .* identical on (all ranks|the "
        r"ranks of this group job): (\w+)",
        output,
    )
    assert final, output
    return final


@pytest.fixture(scope="module")
def one_half_alone() -> float:
    """The control: one process, no exchange, on the even digits (the first half's), at a
    learning rate where one process is stable (at 0.1 it reached 0.50, then diverged)."""
    done = subprocess.run(
        [
            sys.executable,
            str(EXAMPLE),
            "--kv-store",
            "local",
            "--classes",
            "even",
            "--epochs",
            EPOCHS,
            "--lr",
            "0.05",
        ],
        capture_output=True,
        check=False,
        text=True,
        timeout=JOB_TIMEOUT,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return float(re.search(r"final test accuracy ([0-9.]+)", done.stdout).group(1))


def train_digits(mode: str, ranks: int, launcher_options, env, *example_options: str) -> str:
    """Runs the example on `ranks` ranks, the digits split by class; returns its output."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "mxkv_hybrid.launch",
            "-n",
            str(ranks),
            "--timeout",
            str(JOB_TIMEOUT),
            *launcher_options,
            "--",
            "python",
            str(EXAMPLE),
            "--epochs",
            EPOCHS,
            "--classes",
            "split",
            *example_options,
        ],
        capture_output=True,
        check=False,
        text=True,
        timeout=JOB_TIMEOUT + 30,
        env=dict(os.environ, MXKV_MODE=mode, **env),
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"(MXKV_MODE={mode})" in done.stdout
    return done.stdout


@pytest.mark.parametrize(
    "mode, ranks, launcher_options, env, example_options",
    [
        ("allreduce", 2, [], {}, []),
        # 2 groups of 2: the halves are the groups; across them only the slices travel
        ("allreduce", 4, [], {"MXKV_GROUP_SIZE": "2", "MXKV_HIERARCHY": "on"}, []),
        ("sync", 2, TWO_GROUPS, {}, []),
        # stale momentum updates of 2 groups do not learn (docs/modes/async.md). One MPI job:
        # as separate jobs (each its own mpiexec and imports) the groups started seconds apart
        # under a second job's load, the late one trained its last steps alone and forgot the
        # other half (0.536, 0.539, 0.669 in 3 of 8 such runs, 1 of them CI's); in one job,
        # 10 of 10 passed, 8 of them under that load
        ("async", 2, TWO_GROUPS + ["--one-job"], {}, ["--momentum", "0"]),
        # synchronous EASGD: asynchronous, the centre depends on how the two groups' exchanges
        # interleave (ps: 0.56-0.88 in 5 runs of the same code; rma under a second job's load:
        # 0.52-0.84 in 4 runs); synchronous: 0.925 in every run (3 each, rma under that load).
        # At alpha 0.45, the paper's beta / groups: the default rule's 0.1 at tau 4, chosen on
        # shuffled data (test_defaults_converge keeps it honest there), lets these halves,
        # each with its own classes, share too little in 8 epochs: 0.7028 in 4 of 4 ps runs
        # and 0.71-0.79 in 4 rma runs, against the bound 0.7 (0.925 and 0.90-0.93 at 0.45)
        ("easgd", 2, TWO_GROUPS + ["--one-job"], {**EASGD_SYNC}, []),
        ("easgd", 2, ["--group-size", "1"], {"MXKV_TRANSPORT": "rma", **EASGD_SYNC}, []),
        # at the control's lr: at 0.1 with momentum 0.9 the halves' models drift apart within
        # the 4 steps between averagings, and their average scored 0.900 on one machine and
        # 0.664 on another (same code, other float rounding); at 0.05: 0.89-0.95 (6-10 epochs)
        ("lasgd", 2, [], {}, ["--lr", "0.05"]),
    ],
    ids=["allreduce", "hierarchical", "sync", "async", "easgd-ps", "easgd-rma", "lasgd"],
)
def test_digits_split_by_class_are_learned_only_through_the_exchange(
    one_half_alone, mode, ranks, launcher_options, env, example_options
):
    final = final_accuracy(train_digits(mode, ranks, launcher_options, env, *example_options))
    assert float(final.group(1)) >= BOUND and final.group(3) == "True", final.group(0)
    # the control learned its half (far above chance, 0.1) and fails the same bound
    assert 0.4 < one_half_alone < BOUND, one_half_alone
