"""A parameter-server process, as mxkv-launch starts them (its scheduler runs
`scheduler.py`, which needs no MXNet Python):

    DMLC_ROLE=server python -m mxkv_hybrid.ps.server

MXNet serves from inside its own import when DMLC_ROLE is set (kvstore_server.py's
`_init_kvstore_server_module`), before `mxnet.__version__` exists: a library that checks
MXNet's version at import (gluoncv, gluonnlp), which the server imports to unpickle an LR
scheduler, fails there (apache/mxnet PR #13742, never merged). So this process imports
MXNet whole with the role hidden (ps-lite reads DMLC_ROLE from the environment when it
asks, not at MXNet's import), then serves as MXNet would, with a controller that ends the
process naming what it could not load, where MXNet's would print 'Exception ignored' and
leave the workers waiting. Running this module imports the package first, so the
optimizers the workers send (`ps.optimizers`, the user's inside by value) load here.
"""

import functools
import logging
import os
import sys
import traceback
from typing import Any, Callable

from . import server_states

log = logging.getLogger(__name__)  # (the package's console, configured at its import)
ROLES = ("server", "scheduler")
Controller = Callable[[int, bytes, Any], None]  # MXNet's: (command, body, handle)


def main() -> None:
    role = os.environ.pop("DMLC_ROLE", None)
    if role not in ROLES:
        sys.exit(f"mxkv_hybrid.ps.server: DMLC_ROLE must be one of {ROLES}, not {role!r}")
    import mxnet as mx  # whole: as a worker's (no DMLC_ROLE), nothing serves yet

    os.environ["DMLC_ROLE"] = role
    server = mx.kvstore.KVStoreServer(mx.kv.create("dist"))
    server._controller = functools.partial(_ending_on_failure, server._controller, server)
    server.run()  # until every worker has left
    sys.exit(0)


def _ending_on_failure(mxnets: Callable[[], Controller], server: Any) -> Controller:
    """MXNet's controller (the commands the workers send: their optimizer), with the
    commands of server_states.py before it, ending the process with a line naming what
    failed rather than an exception ignored in ctypes."""
    run_command = mxnets()

    def controller(command: int, body: bytes, handle: Any) -> None:
        states = server_states.parse(body)
        try:
            if states is None:
                run_command(command, body, handle)
            else:
                server_states.handle(*states, server.kvstore)
        except Exception as err:  # noqa: BLE001 (a ctypes callback cannot raise)
            where = traceback.extract_tb(err.__traceback__)[-1]
            what = (
                server_states.describe(*states) if states else "load the optimizer the workers sent"
            )
            fix = (
                "A class the servers import by name must be importable where they run "
                "(installed, or on PYTHONPATH); one of the script, or of a module beside it, "
                "is sent by value"
                if states is None
                else "The servers read and write these files on their own file system"
            )
            log.error(
                f"mxkv_hybrid: parameter server {server.kvstore.rank} cannot {what}: "
                f"{type(err).__name__}: {err} (at {where.filename}:{where.lineno}). {fix}. "
                "Ending this server"
            )
            os._exit(1)

    return controller


if __name__ == "__main__":
    main()
