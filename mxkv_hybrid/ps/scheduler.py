"""The ps-lite scheduler process, as mxkv-launch starts it (DMLC_ROLE=scheduler, this file
run as a script):

    DMLC_ROLE=scheduler python .../mxkv_hybrid/ps/scheduler.py

The scheduler only introduces the nodes to each other and holds their barriers; it runs no
optimizer, so it needs libmxnet and not MXNet's Python package, whose import generates the
Python of every operator (2 s of CPU, on the critical path: the servers and ranks start
once the scheduler listens). This calls the C API that `import mxnet` calls under
DMLC_ROLE=scheduler (mxnet/kvstore/kvstore_server.py): MXKVStoreCreate("dist"), then
MXKVStoreRunServer, which returns when every node has left. libmxnet is found by MXNet's
own search (mxnet/libinfo.py: MXNET_LIBRARY_PATH, then the package's folder).
"""

import ctypes
import importlib.util
import os
import sys

# void (*)(int head, const char *body, void *handle): called on servers only, never here
CONTROLLER = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p)


def load_libmxnet() -> ctypes.CDLL:
    """libmxnet, where `import mxnet` would load it from, without importing the package."""
    package = importlib.util.find_spec("mxnet")
    if package is None or not package.submodule_search_locations:
        sys.exit("mxkv_hybrid.ps.scheduler: MXNet is not installed in this environment")
    libinfo_path = os.path.join(package.submodule_search_locations[0], "libinfo.py")
    spec = importlib.util.spec_from_file_location("mxnet_libinfo", libinfo_path)
    if spec is None or spec.loader is None:  # (a .py path always gives one)
        sys.exit(f"mxkv_hybrid.ps.scheduler: cannot load MXNet's {libinfo_path}")
    libinfo = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(libinfo)
    return ctypes.CDLL(libinfo.find_lib_path()[0], ctypes.RTLD_LOCAL)


def check(lib: ctypes.CDLL, status: int) -> None:
    if status != 0:
        sys.exit(f"mxkv_hybrid.ps.scheduler: {lib.MXGetLastError().decode()}")


def main() -> None:
    if os.environ.get("DMLC_ROLE") != "scheduler":
        sys.exit(
            f"mxkv_hybrid.ps.scheduler: DMLC_ROLE must be 'scheduler', not "
            f"{os.environ.get('DMLC_ROLE')!r}"
        )
    lib = load_libmxnet()
    lib.MXGetLastError.restype = ctypes.c_char_p
    store = ctypes.c_void_p()
    check(lib, lib.MXKVStoreCreate(b"dist", ctypes.byref(store)))
    never_called = CONTROLLER(lambda head, body, handle: None)
    check(lib, lib.MXKVStoreRunServer(store, never_called, None))


if __name__ == "__main__":
    main()
