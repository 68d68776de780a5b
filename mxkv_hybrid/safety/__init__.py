"""The nets under a training run: a rehearsed failure (`fault`, MXKV_FAULT), a deadline for
operations that have none of their own (`watchdog`, around ps-lite calls), NaN/Inf caught
before anything is combined (`finite_check`, MXKV_CHECK_FINITE), and checkpoints that a
run resumes from on the same trajectory (`checkpoint`, public as `mxkv_hybrid.checkpoint`).
The stall monitor is in `comm/`, beneath the collectives that wait under it.

May import `comm/` and the root's `config`, `capabilities`, `errors` and `atomic_file`.
"""
