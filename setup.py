"""Builds the C++ tensor collectives (csrc/) as mxkv_hybrid.comm._C; metadata is in
pyproject.toml."""

import glob
import os
import shlex
import shutil
import subprocess
import sys
from importlib import metadata

from pybind11.setup_helpers import ParallelCompile, Pybind11Extension, build_ext
from setuptools import setup


def find_mpi() -> dict:
    """Include/library dirs of the MPI to compile against: the mpich wheel, else `mpicc -show`."""
    try:
        files = metadata.distribution("mpich").files or []
        headers = [f.locate() for f in files if str(f).endswith("include/mpi.h")]
        libs = [f.locate() for f in files if os.path.basename(str(f)).startswith("libmpi.so")]
        if headers and libs:
            return {
                "include_dirs": [os.path.dirname(str(headers[0]))],
                "library_dirs": [os.path.dirname(str(libs[0]))],
                "libraries": ["mpi"],
            }
    except metadata.PackageNotFoundError:
        pass
    mpicc = os.environ.get("MPICC") or shutil.which("mpicc")
    if not mpicc:
        sys.exit("mxkv_hybrid: no MPI found to build against: `pip install mpich` or set MPICC")
    flags = shlex.split(subprocess.check_output([mpicc, "-show"], text=True))
    return {
        "include_dirs": [f[2:] for f in flags if f.startswith("-I")],
        "library_dirs": [f[2:] for f in flags if f.startswith("-L")],
        "libraries": [f[2:] for f in flags if f.startswith("-l")] or ["mpi"],
    }


mpi = find_mpi()
extension = Pybind11Extension(
    "mxkv_hybrid.comm._C",
    sorted(glob.glob("csrc/*.cpp")),
    include_dirs=["csrc", *mpi["include_dirs"]],
    library_dirs=mpi["library_dirs"],
    libraries=mpi["libraries"],
    # The installed mpich wheel's libmpi, next to this interpreter's prefix.
    runtime_library_dirs=[os.path.join(sys.prefix, "lib")],
    cxx_std=20,
    extra_compile_args=["-O3", "-fno-math-errno"],
)

# csrc/'s files compiled side by side, one per processor (pybind11's helper)
ParallelCompile(default=0).install()
setup(ext_modules=[extension], cmdclass={"build_ext": build_ext})
