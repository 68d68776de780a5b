"""A warm interpreter for the job tests: one process that has imported MXNet forks each
rank, server and launcher the suite starts, instead of each paying the import (about 1.3
CPU-seconds) again. The rest is as real as before: mpiexec, its proxies, the scheduler
and every process that does not import MXNet are started as they always are.

    python zygote.py SOCKET          # serves; started once a session (the fixture)
    <folder>/python ARGS...          # the stand-in interpreter each job is given

The stand-in runs `python -m mxkv_hybrid.{run,launch,ps.server} ...` by handing
its arguments, environment, working folder and every open file descriptor to the warm
process, which forks a child that takes them over and runs the module as `python -m`
would; the stand-in waits, passes on the signals it gets, and ends as the child ended
(its exit status, or killed by the same signal). Killed itself (SIGKILL), it closes its
socket and the child is killed. So the stand-in, a process of the job with the job's
command line and environment in /proc, lives exactly as long as the child: what finds
a job's processes there (support.jobs.processes_of) finds it, and what kills it kills the
child. The child's sys.executable is the stand-in, so what it starts is started the
same way.

Anything else, or an environment whose settings read at start (READ_AT_START) differ from
the warm process's, runs the real interpreter (exec)."""

import array
import fcntl
import json
import os
import select
import signal
import socket
import sys
from typing import Dict, List, Optional, Tuple

FORKED_MODULES = ("mxkv_hybrid.run", "mxkv_hybrid.launch", "mxkv_hybrid.ps.server")
# settings a process reads when MXNet, MPI or the package start: a process given values
# other than the warm process's runs the real interpreter
READ_AT_START = ("MXNET_", "UCX_", "OMP_", "PYTHON", "LD_", "SETUPTOOLS_")
LAUNCHER = "mxkv_hybrid.launch"  # imports no MXNet: forked whatever its settings
MAX_FDS = 64
ABOVE_WANTED = 4096  # where the child parks what it received before placing it


def read_at_start(env: Dict[str, str]) -> Dict[str, str]:
    """The settings of `env` that a process reads when it starts."""
    return {k: v for k, v in env.items() if k.startswith(READ_AT_START)}


def forkable(argv: List[str]) -> bool:
    """Whether the command line `argv` runs one of FORKED_MODULES."""
    return len(argv) >= 3 and argv[1] == "-m" and argv[2] in FORKED_MODULES


def stand_in(path: str, python: str) -> None:
    """The stand-in interpreter's body (see the module's docstring)."""
    argv = list(sys.argv)
    with open(path + ".json") as f:
        warm = json.load(f)
    same_network = os.readlink("/proc/self/ns/net") == warm["net"]
    same_start = argv[2:3] == [LAUNCHER] or read_at_start(dict(os.environ)) == warm["env"]
    if not (forkable(argv) and same_network and same_start):
        os.execv(python, [python, *argv[1:]])
    fds = sorted(int(n) for n in os.listdir("/proc/self/fd"))
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    connection.connect(path)
    fds = [fd for fd in fds if fd != connection.fileno() and _is_open(fd)]
    if len(fds) > MAX_FDS:
        connection.close()
        os.execv(python, [python, *argv[1:]])
    task = {
        "argv": argv,
        "env": dict(os.environ),
        "cwd": os.getcwd(),
        "fds": fds,
    }
    body = json.dumps(task).encode()
    connection.sendmsg(
        [len(body).to_bytes(8, "little"), body],
        [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))],
    )
    for fd in fds:
        if fd > 2:
            os.close(fd)
    reply = connection.makefile("r")
    child = int(reply.readline())

    def pass_on(signum, frame) -> None:
        try:
            os.kill(child, signum)
        except ProcessLookupError:
            pass

    for sig in (
        signal.SIGTERM,
        signal.SIGINT,
        signal.SIGHUP,
        signal.SIGUSR1,
        signal.SIGUSR2,
        signal.SIGQUIT,
        signal.SIGCONT,
    ):
        signal.signal(sig, pass_on)
    line = reply.readline()  # (retried after a signal passed on, PEP 475)
    if not line:
        os._exit(1)  # the warm process ended
    status = int(line)
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        if sig not in (signal.SIGKILL, signal.SIGSTOP):  # (those cannot be caught)
            signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
    os._exit(os.waitstatus_to_exitcode(status))


def _is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
        return True
    except OSError:
        return False


# ---------------------------------------------------------------------------- the warm process


def serve(path: str, settings: Dict[str, str]) -> Optional[dict]:
    """Accepts stand-ins until stdin closes; returns a task in each forked child."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    with open(path + ".json", "w") as f:
        json.dump({"env": settings, "net": os.readlink("/proc/self/ns/net")}, f)
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_write, False)
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    children: Dict[int, socket.socket] = {}  # pid -> its stand-in's connection
    print("ready", flush=True)
    while True:
        readable, _, _ = select.select(
            [sys.stdin, listener, wake_read, *children.values()], [], [], 1.0
        )
        if sys.stdin in readable and not sys.stdin.readline():
            for pid in children:
                _kill(pid)
            return None
        if wake_read in readable:
            os.read(wake_read, 4096)
        _reap(children)
        for pid, connection in children.items():
            if connection in readable and not connection.recv(1):  # its stand-in is gone
                _kill(pid)  # (reaped, and its connection closed, at a later turn)
        if listener in readable:
            connection, _ = listener.accept()
            task, fds = _receive(connection)
            pid = os.fork()
            if pid == 0:
                signal.set_wakeup_fd(-1)
                os.close(wake_read)
                os.close(wake_write)
                listener.close()
                for other in children.values():
                    other.close()
                connection.close()
                task["received"] = fds
                return task
            for fd in fds:
                os.close(fd)
            connection.sendall(f"{pid}\n".encode())
            children[pid] = connection


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _reap(children: Dict[int, socket.socket]) -> None:
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        connection = children.pop(pid, None)
        if connection is not None:
            try:
                connection.sendall(f"{status}\n".encode())
            except OSError:
                pass
            connection.close()


def _receive(connection: socket.socket) -> Tuple[dict, List[int]]:
    """A stand-in's task and the descriptors it sent (as numbered here)."""
    fds = array.array("i")
    size, ancillary, _, _ = connection.recvmsg(8, socket.CMSG_SPACE(MAX_FDS * fds.itemsize))
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(data[: len(data) - (len(data) % fds.itemsize)])
    length = int.from_bytes(size, "little")
    body = b""
    while len(body) < length:
        body += connection.recv(length - len(body))
    return json.loads(body), list(fds)


# ------------------------------------------------------------------------------- the child


def become(task: dict) -> None:
    """Turns this forked child into the process its stand-in would have started."""
    os.setsid()
    for sig in (
        signal.SIGTERM,
        signal.SIGHUP,
        signal.SIGQUIT,
        signal.SIGUSR1,
        signal.SIGUSR2,
        signal.SIGCHLD,
    ):
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    received, wanted = task["received"], task["fds"]
    high = [fcntl.fcntl(fd, fcntl.F_DUPFD, ABOVE_WANTED) for fd in received]  # (clear of them)
    for fd in received:
        os.close(fd)
    for fd, number in zip(high, wanted):
        os.dup2(fd, number)
        os.close(fd)
    os.chdir(task["cwd"])
    os.environ.clear()
    os.environ.update(task["env"])
    sys.executable = task["argv"][0]
    sys.path[0] = task["cwd"]  # as `python -m` puts it
    import numpy

    numpy.random.seed()  # a process of its own draws its own numbers (random reseeds itself)
    unbuffered = bool(os.environ.get("PYTHONUNBUFFERED"))
    buffering = 1 if unbuffered or os.isatty(1) else -1
    _set_streams(0, 1, 2, buffering)


def _set_streams(stdin: int, stdout: int, stderr: int, buffering: int) -> None:
    """sys.stdin, stdout and stderr (and their __dunder__ twins) on these descriptors."""
    sys.stdin = sys.__stdin__ = open(stdin)  # noqa: SIM115  (open for the process's life)
    sys.stdout = sys.__stdout__ = open(stdout, "w", buffering=buffering)  # noqa: SIM115
    sys.stderr = sys.__stderr__ = open(stderr, "w", buffering=1, errors="backslashreplace")  # noqa: SIM115


def own_streams_away_from_0_1_2() -> None:
    """The warm process's own stdin, stdout and stderr moved to descriptors of their own,
    and 0, 1, 2 left on /dev/null, owned by no Python object: a child puts its stand-in's
    there, and no object left over from the warm process closes them."""
    _set_streams(os.dup(0), os.dup(1), os.dup(2), buffering=-1)
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.close(null)


def main() -> None:
    settings = read_at_start(dict(os.environ))  # (before MXNet's import adds its own)
    own_streams_away_from_0_1_2()
    import mxnet  # noqa: F401  (the import every child is spared)
    import numpy  # noqa: F401

    task = serve(sys.argv[1], settings)
    if task is None:
        return
    become(task)
    import runpy

    module = task["argv"][2]
    sys.argv = [module, *task["argv"][3:]]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
