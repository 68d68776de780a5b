"""The C++ extension _C, loaded once: libmpi first (_C links against it; mpi4py loads it),
then MXNet's C API handed to it. Imports no more of MXNet than its C library, so that a
parameter server can load it inside MXNet's own import (mode async's codes)."""

import ctypes
import sys
from functools import lru_cache

from mxnet import base

_MXNET_FUNCTIONS = (
    "MXNDArrayGetData",
    "MXNDArrayGetShapeEx",
    "MXNDArrayGetDType",
    "MXNDArrayGetContext",
    "MXNDArrayGetStorageType",
    "MXNDArrayWaitAll",
    "MXGetLastError",
    "MXEnginePushAsyncND",
)


@lru_cache(maxsize=None)
def extension():
    """_C, after mpi4py has loaded libmpi, with MXNet's C API bound."""
    from mpi4py import MPI  # noqa: F401  (loads libmpi.so for _C)

    from . import _C

    _C.bind_mxnet_api(
        {
            name: ctypes.cast(getattr(base._LIB, name), ctypes.c_void_p).value
            for name in _MXNET_FUNCTIONS
        }
    )
    return _C


def extension_without_mpi():
    """_C in a process that is no MPI rank and must not start MPI: a parameter server.
    libmpi is loaded for _C; MPI_Init is not called (unless mpi4py.MPI was imported
    before, as on an MPI rank)."""
    if "mpi4py.MPI" not in sys.modules:
        import mpi4py

        mpi4py.rc.initialize = mpi4py.rc.finalize = False
    return extension()
