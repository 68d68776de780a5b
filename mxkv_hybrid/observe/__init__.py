"""What a running job says about itself: the step summary (`step_summary`,
MXKV_SUMMARY_EVERY), one line every k steps with compute and communication time and the
bytes moved inside and across groups. The timeline recorder (MXKV_TIMELINE) is in `comm/`,
beneath the collectives that record into it; `mxkv-launch --check` is in `launch/`.

May import `ps/`, `safety/`, `comm/` and the root's `config`, `errors` and `atomic_file`.
"""
