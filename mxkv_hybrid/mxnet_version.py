"""The MXNet this package runs on: 1.9.x, whichever build the user installed (the CPU wheel
`mxnet`, or a CUDA one such as `mxnet-cu112`): found at `import mxkv_hybrid`
(`require_mxnet_installed`, which does not load it), its version checked once it is
imported (`require_mxnet`)."""

import importlib
import importlib.util

SUPPORTED = "1.9."
INSTALL_LINES = (
    "CPU: pip install 'mxkv_hybrid[cpu]' (from a checkout: pip install -e '.[cpu]'), which "
    "installs mxnet==1.9.1; GPU: pip install mxnet-cu117==1.9.1 (or the mxnet-cu1xx==1.9.1 of "
    "your CUDA), then pip install mxkv_hybrid (from a checkout: pip install -e .)"
)


def _missing(reason: object) -> ImportError:
    return ImportError(
        f"mxkv_hybrid needs Apache MXNet 1.9.x and cannot import it ({reason}). "
        f"Install one build of it: {INSTALL_LINES}"
    )


def require_mxnet_installed() -> None:
    """Raises ImportError naming both install lines when no MXNet can be imported; does
    not import it."""
    try:
        found = importlib.util.find_spec("mxnet") is not None
    except ImportError as err:
        raise _missing(err) from None
    if not found:
        raise _missing("No module named 'mxnet'")


def require_mxnet() -> None:
    """Raises ImportError naming both install lines when MXNet is missing or not 1.9.x."""
    try:
        mxnet = importlib.import_module("mxnet")
    except ImportError as err:
        raise _missing(err) from None
    version = getattr(mxnet, "__version__", "unknown")
    if not version.startswith(SUPPORTED):
        raise ImportError(
            f"mxkv_hybrid needs Apache MXNet 1.9.x, and this environment has "
            f"MXNet {version} ({mxnet.__file__}). Replace it with one 1.9.x build: "
            f"{INSTALL_LINES}"
        )
