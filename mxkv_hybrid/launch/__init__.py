"""Starting jobs: the `mxkv-launch` command (`launcher`: ranks under this environment's own
mpiexec, the parameter-server processes, the timeline merged at the end), every group as
its own MPI job (`group_jobs`, --group-jobs), groups started separately that meet
(`serve_join`, `rendezvous`: --serve, --join), the processes it starts, watches and ends
(`processes`), which rank ended first when a job dies (`rank_watch`), the liveness and
restarts of every launch path (`control`), and the relay that carries ps-lite's
connections between hosts over TLS (`relay`, `job_key`). What the ranks run is at the
root: `python -m mxkv_hybrid.run` (every rank is started through it) and
`python -m mxkv_hybrid.self_check` (`mxkv-launch --check`).

The top layer, yet it imports only the root's base modules and `ps/`'s addresses and
scheduler script: the launcher and its relays never load MXNet, MPI or the rank's layers
(tests/unit/test_layers.py). Nothing imports it, except the rank's side of the control plane
(`control.keeper`, the keeper process and `control.timing`), which every layer may import
and which imports only the base modules.
"""
