"""The package's messages: every module logs to `logging.getLogger(__name__)`, below the
`mxkv_hybrid` logger, which alone gets a handler here (the root logger and other libraries'
loggers are left alone). Its level is MXKV_LOG_LEVEL (`mxkv-launch --log-level`).

The handler writes a record where the message's print wrote it before: below WARNING on
stdout, from WARNING on stderr, unless the call says otherwise (`extra=TO_STDERR`: an
info line of the launcher's, which keeps stdout for the ranks' output; `extra=TO_STDOUT`).
A rank's lines start with `[rank N] ` unless mxkv-launch started it: its mpiexec already
starts every line of a rank with `[N] ` (the launcher, its relays and the parameter
servers are not ranks). A handler of the user's gets the same text with
`RankFormatter()`, which names the rank in every rank:

    handler = logging.FileHandler("job.log")
    handler.setFormatter(mxkv_hybrid.logs.RankFormatter())
    logging.getLogger("mxkv_hybrid").addHandler(handler)
"""

import logging
import os
import sys
from typing import Mapping, Optional

from .config import read_knob

LOGGER = "mxkv_hybrid"
HANDLER = "mxkv_hybrid.console"  # the name of the handler `configure` adds
TO_STDERR = {"stream": "stderr"}  # extra= of an info line that goes to stderr
TO_STDOUT = {"stream": "stdout"}  # extra= of a warning that goes to stdout


def rank_of_process(environ: Optional[Mapping[str, str]] = None) -> Optional[int]:
    """This process's rank in the whole job (a group job's first rank added), or None
    outside an MPI job."""
    environ = os.environ if environ is None else environ
    local = environ.get("PMI_RANK", environ.get("OMPI_COMM_WORLD_RANK"))
    if local is None:
        return None
    job = read_knob("MXKV_GROUP_JOB", environ)
    return (job.first_rank if job is not None else 0) + int(local)


class RankFormatter(logging.Formatter):
    """The message, after `[rank N] ` where a rank is given (default: this process's)."""

    def __init__(self, rank: Optional[int] = -1):
        super().__init__()
        rank = rank_of_process() if rank == -1 else rank
        self.prefix = "" if rank is None else f"[rank {rank}] "

    def format(self, record: logging.LogRecord) -> str:
        return self.prefix + super().format(record)


class ConsoleHandler(logging.Handler):
    """Writes each record on stdout or stderr (`TO_STDERR`, `TO_STDOUT`, else by level), as
    they are when it is written, and flushes it."""

    def emit(self, record: logging.LogRecord) -> None:
        chosen = getattr(record, "stream", None)
        if chosen is None:
            chosen = "stderr" if record.levelno >= logging.WARNING else "stdout"
        stream = sys.stderr if chosen == "stderr" else sys.stdout
        try:
            stream.write(self.format(record) + "\n")
            stream.flush()
        except Exception:  # noqa: BLE001 -- logging's own contract: handleError reports it
            self.handleError(record)


def console_formatter(
    environ: Optional[Mapping[str, str]] = None, is_rank: bool = True
) -> RankFormatter:
    """The console's formatter: a rank named (not a parameter server, nor a rank of
    mxkv-launch, whose lines mpiexec names)."""
    environ = os.environ if environ is None else environ
    named = (
        is_rank
        and environ.get("DMLC_ROLE", "worker") == "worker"
        and not read_knob("MXKV_LAUNCHER_LINK", environ)
    )
    return RankFormatter(rank_of_process(environ) if named else None)


def set_level(level: str) -> None:
    """The level of every message of the package: debug, info, warning or error."""
    logging.getLogger(LOGGER).setLevel(level.upper())


def configure(environ: Optional[Mapping[str, str]] = None, is_rank: bool = True) -> None:
    """Adds the console handler to the `mxkv_hybrid` logger (once; a later call sets its
    formatter again) and sets its level from MXKV_LOG_LEVEL; its records do not go on to
    the root logger's handlers too. `is_rank`: False in the launcher's own processes (the
    launcher, a relay), which say so when their `main` starts."""
    logger = logging.getLogger(LOGGER)
    handler = next((h for h in logger.handlers if h.name == HANDLER), None)
    if handler is None:
        handler = ConsoleHandler()
        handler.name = HANDLER
        logger.addHandler(handler)
    handler.setFormatter(console_formatter(environ, is_rank))
    logger.propagate = False
    set_level(str(read_knob("MXKV_LOG_LEVEL", environ)))
