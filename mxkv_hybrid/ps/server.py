"""A parameter-server process, as mxkv-launch starts them (its scheduler runs
`scheduler.py`, which needs no MXNet Python):

    DMLC_ROLE=server python -m mxkv_hybrid.ps.server

MXNet becomes a ps-lite server or scheduler when it is imported with DMLC_ROLE set, serves
until every worker has left, then exits the process. Running this module imports its
package first, and the package imports MXNet: that import is where the node runs (seen:
`import mxkv_hybrid` under DMLC_ROLE=scheduler does not return), with the package on
sys.modules, so the optimizers the workers pickle (`ps.optimizers`) unpickle by name on
the server. `main` is reached only when DMLC_ROLE names no node.
"""

import os
import sys

ROLES = ("server", "scheduler")


def main() -> None:
    role = os.environ.get("DMLC_ROLE")
    sys.exit(f"mxkv_hybrid.ps.server: DMLC_ROLE must be one of {ROLES}, not {role!r}")


if __name__ == "__main__":
    main()
