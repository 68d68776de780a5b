"""A parameter-server process, as mxkv-launch starts them (its scheduler runs
`scheduler.py`, which needs no MXNet Python):

    DMLC_ROLE=server python -m mxkv_hybrid.ps.server

MXNet becomes a ps-lite server or scheduler when it is imported with DMLC_ROLE set, serves
until every worker has left, then exits the process (seen: that import does not return).
Running this module imports the package first, so the optimizers the workers pickle
(`ps.optimizers`) unpickle by name on the server; `main` imports MXNet, which is where the
node runs.
"""

import os
import sys

ROLES = ("server", "scheduler")


def main() -> None:
    role = os.environ.get("DMLC_ROLE")
    if role not in ROLES:
        sys.exit(f"mxkv_hybrid.ps.server: DMLC_ROLE must be one of {ROLES}, not {role!r}")
    import mxnet  # noqa: F401  (the node: serves, then exits the process)

    sys.exit(f"mxkv_hybrid.ps.server: MXNet returned from its import as a {role}")


if __name__ == "__main__":
    main()
