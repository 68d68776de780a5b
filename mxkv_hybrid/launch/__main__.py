"""`python -m mxkv_hybrid.launch ...` is `mxkv-launch ...`, for an environment whose
scripts directory is not on PATH."""

from .launcher import main

main()
