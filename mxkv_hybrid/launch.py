"""mxkv-launch: starts the ranks of a training job with this environment's own MPI.

    mxkv-launch -n 4 -- python train.py --kv-store hybrid
    mxkv-launch -n 8 -H host1:4,host2:4 -- python train.py

`python script.py` (and `python -m module`) is run as `python -m mxkv_hybrid.run ...`
with this interpreter, so unmodified scripts get the plugin. Every output line is
prefixed with its rank. The exit status is non-zero when any rank fails, and the
whole process tree is ended on failure, timeout or Ctrl-C.
"""
import argparse
import os
import shutil
import signal
import subprocess
import sys
import time
from typing import List, Optional

GRACE_SECONDS = 5.0


def find_mpiexec() -> str:
    """The mpiexec that belongs to the MPI mpi4py uses: this environment's, else PATH's."""
    here = os.path.join(sys.prefix, "bin", "mpiexec")
    if os.access(here, os.X_OK):
        return here
    found = shutil.which("mpiexec")
    if found is None:
        sys.exit("mxkv-launch: no mpiexec found; install MPI with `pip install mpich`")
    return found


def _flavour(mpiexec: str) -> str:
    text = subprocess.run([mpiexec, "--version"], capture_output=True, text=True).stdout
    return "openmpi" if "Open MPI" in text or "OpenRTE" in text else "hydra"


def mpi_arguments(flavour: str, args: argparse.Namespace) -> List[str]:
    """Options for mpiexec: process count, hosts and rank-prefixed output."""
    if flavour == "openmpi":
        out = ["-n", str(args.num_ranks), "--tag-output", "--oversubscribe"]
        out += ["-H", args.hosts] if args.hosts else []
        out += ["--hostfile", args.hostfile] if args.hostfile else []
    else:
        out = ["-n", str(args.num_ranks), "-prepend-rank"]
        out += ["-hosts", args.hosts] if args.hosts else []
        out += ["-f", args.hostfile] if args.hostfile else []
    return out


PYTHON_OPTIONS_WITH_VALUE = ("-W", "-X", "--check-hash-based-pycs")


def wrap_command(command: List[str]) -> List[str]:
    """`python [options] x.py ...` -> `<this python> [options] -m mxkv_hybrid.run x.py ...`,
    the same for `-m module`; anything else (`-c`, other programs) is left unchanged."""
    if not os.path.basename(command[0]).startswith("python"):
        return command
    position = 1
    while position < len(command) and command[position].startswith("-") \
            and command[position] != "-m":
        if command[position] == "-c":
            return command
        position += 2 if command[position] in PYTHON_OPTIONS_WITH_VALUE else 1
    if position >= len(command):
        return command
    options, target = command[1:position], command[position:]
    if target[:2] == ["-m", "mxkv_hybrid.run"]:
        target = target[2:]
    return [sys.executable, *options, "-m", "mxkv_hybrid.run", *target]


class _Terminated(Exception):
    """SIGTERM/SIGHUP reached the launcher."""


def _raise_terminated(signum, frame):
    raise _Terminated(signal.Signals(signum).name)


def live_group_members(pgid: int) -> List[int]:
    """PIDs in process group `pgid` that are still running (zombies excluded)."""
    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            members.append(int(entry))
    return members


def _end_process_group(process: subprocess.Popen) -> None:
    """SIGTERM the job's process group, then SIGKILL whatever outlives the grace period."""
    process.poll()
    for sig in (signal.SIGTERM, signal.SIGKILL):
        if not live_group_members(process.pid):
            break
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            break
        deadline = time.monotonic() + GRACE_SECONDS
        while live_group_members(process.pid) and time.monotonic() < deadline:
            time.sleep(0.1)
    process.wait()


def run(command: List[str], timeout: Optional[float]) -> int:
    """Runs the job in its own session; returns its exit status (124 timeout, 130 stopped)."""
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _raise_terminated)
    process = subprocess.Popen(command, start_new_session=True)
    deadline = None if timeout is None else time.monotonic() + timeout
    try:
        while True:
            try:
                code = process.wait(timeout=1.0)
                break
            except subprocess.TimeoutExpired:
                if deadline is not None and time.monotonic() > deadline:
                    print(f"mxkv-launch: timed out after {timeout:g} s; stopping all ranks",
                          file=sys.stderr, flush=True)
                    _end_process_group(process)
                    return 124
    except (KeyboardInterrupt, _Terminated) as stop:
        print(f"mxkv-launch: {stop.__class__.__name__} {stop}; stopping all ranks",
              file=sys.stderr, flush=True)
        _end_process_group(process)
        return 130
    _end_process_group(process)  # leftovers of a failed job (e.g. a rank stuck in a collective)
    if code != 0:
        print(f"mxkv-launch: the job failed with exit status {code}; the first rank-prefixed "
              "error above names the failing rank", file=sys.stderr, flush=True)
    return code


def parse_arguments(argv: Optional[List[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="mxkv-launch", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-n", "--num-ranks", type=int, required=True, help="number of ranks")
    parser.add_argument("-H", "--hosts", help="host1:slots,host2:slots (passed to mpiexec)")
    parser.add_argument("--hostfile", help="MPI host file (passed to mpiexec)")
    parser.add_argument("--timeout", type=float, help="stop every rank after this many seconds")
    parser.add_argument("--dry-run", action="store_true", help="print the mpiexec command only")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- program [args...]")
    args = parser.parse_args(argv)
    if args.command[:1] == ["--"]:
        args.command = args.command[1:]
    if not args.command:
        parser.error("no command given: mxkv-launch -n 2 -- python train.py")
    if args.num_ranks < 1:
        parser.error("-n must be at least 1")
    return args


def main(argv: Optional[List[str]] = None) -> None:
    args = parse_arguments(argv)
    mpiexec = find_mpiexec()
    command = [mpiexec, *mpi_arguments(_flavour(mpiexec), args), *wrap_command(args.command)]
    if args.dry_run:
        print(" ".join(command))
        return
    sys.exit(run(command, args.timeout))


if __name__ == "__main__":
    main()
