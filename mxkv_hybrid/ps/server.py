"""A parameter-server process: `DMLC_ROLE=server|scheduler python -m mxkv_hybrid.ps.server`.

MXNet becomes a ps-lite server or scheduler when it is imported with DMLC_ROLE set. This
module imports MXNet (and this package, so that optimizers defined here can be unpickled
on the server) as a normal library first, then starts the node MXNet's own way. It
serves until every worker has left, then exits. mxkv-launch starts these processes.
"""
import os
import sys

ROLES = ("server", "scheduler")


def main() -> None:
    role = os.environ.get("DMLC_ROLE")
    if role not in ROLES:
        sys.exit(f"mxkv_hybrid.ps.server: DMLC_ROLE must be one of {ROLES}, not {role!r}")
    del os.environ["DMLC_ROLE"]  # import mxnet as a library, not as the node
    import mxnet  # noqa: F401
    from mxnet.kvstore import kvstore_server

    import mxkv_hybrid  # noqa: F401  (its optimizers must be importable when unpickled)

    os.environ["DMLC_ROLE"] = role
    kvstore_server._init_kvstore_server_module()  # serves, then exits the process


if __name__ == "__main__":
    main()
