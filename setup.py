"""Builds the C++ tensor collectives (csrc/) as mxkv_hybrid.comm._C and the relay's TLS
connections (csrc/relay/) as mxkv_hybrid.launch._tls; metadata is in pyproject.toml."""

import glob
import os
import shlex
import shutil
import subprocess
import sys
import sysconfig
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


def check_openssl() -> None:
    """Stops with the fix when OpenSSL's headers, which the relay compiles against, are missing."""
    places = ["/usr/include", "/usr/local/include", sysconfig.get_config_var("INCLUDEDIR") or ""]
    places += os.environ.get("CPATH", "").split(os.pathsep)
    if not any(os.path.exists(os.path.join(p, "openssl", "ssl.h")) for p in places if p):
        sys.exit(
            "mxkv_hybrid: OpenSSL's headers are needed to build the relay (csrc/relay/): "
            "`apt install libssl-dev` (Debian, Ubuntu) or `dnf install openssl-devel`, "
            "or name their directory in CPATH"
        )


mpi = find_mpi()
check_openssl()
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
relay = Pybind11Extension(
    "mxkv_hybrid.launch._tls",
    sorted(glob.glob("csrc/relay/*.cpp")),
    include_dirs=["csrc/relay"],
    libraries=["ssl", "crypto"],
    cxx_std=20,
    extra_compile_args=["-O3"],
)

# csrc/'s files compiled side by side, one per processor (pybind11's helper)
ParallelCompile(default=0).install()
setup(ext_modules=[extension, relay], cmdclass={"build_ext": build_ext})
