"""Runs an unmodified script with the plugin active:

    python -m mxkv_hybrid.run script.py [args...]
    python -m mxkv_hybrid.run -m package.module [args...]

`import mxkv_hybrid` happens first, so `kvstore='hybrid'` / `mx.kv.create('hybrid')`
in the script get the Hybrid store instead of MXNet's silent local fallback.
"""

import io
import os
import runpy
import sys
from typing import cast

USAGE = "usage: python -m mxkv_hybrid.run (script.py | -m module) [args...]"


def main(argv=None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help") or (argv[0] == "-m" and len(argv) < 2):
        print(USAGE, file=sys.stderr)
        raise SystemExit(2)

    # One write per line, so mpiexec's rank prefix starts every line and lines of two ranks
    # never share one: PYTHONUNBUFFERED=1 would write each piece of a print separately, and
    # MXNet's C++ log writes each piece of a line to an unbuffered std::cerr.
    for stream in (sys.stdout, sys.stderr):
        cast(io.TextIOWrapper, stream).reconfigure(line_buffering=True, write_through=False)

    import mxkv_hybrid  # noqa: F401  (registers the store, installs the hooks)
    from mxkv_hybrid.comm._C import line_buffer_stderr
    from mxkv_hybrid.integration.auto import script_arguments
    from mxkv_hybrid.launch.control.keeper import tell_launcher_exit

    line_buffer_stderr()
    program = 2 if argv[0] == "-m" else 1  # the script's own arguments follow
    argv = argv[:program] + script_arguments(argv[program:])  # --auto: this rank's --gpus

    try:
        if argv[0] == "-m":
            sys.argv = [argv[1], *argv[2:]]
            runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        else:
            sys.argv = argv
            sys.path.insert(0, os.path.dirname(os.path.abspath(argv[0])))
            runpy.run_path(argv[0], run_name="__main__")
    except SystemExit as stop:
        tell_launcher_exit(exit_status(stop.code))
        raise
    except BaseException:
        tell_launcher_exit(1)  # Python prints the traceback and exits with 1
        raise
    tell_launcher_exit(0)


def exit_status(code) -> int:
    """The status a SystemExit's code gives: None 0, a number itself, anything else 1."""
    if code is None:
        return 0
    return code if isinstance(code, int) else 1


if __name__ == "__main__":
    main()
