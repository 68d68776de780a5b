"""Starting jobs: the `mxkv-launch` command (`launcher`: ranks under this environment's own
mpiexec, the parameter-server processes, the timeline merged at the end), every group as
its own MPI job (`group_jobs`, --group-jobs), groups started separately that meet
(`serve_join`, `rendezvous`: --serve, --join), the processes it starts, watches and ends
(`processes`), which rank ended first when a job dies (`rank_watch`), and the installation
and topology self-test that `mxkv-launch --check` runs on every rank (`self_check`), and the
relay that carries ps-lite's connections between hosts over TLS (`relay`, `job_key`). The
runner that every rank is started through, `python -m mxkv_hybrid.run`, is a public
command and stays at the top.

The top layer: may import anything in the package; nothing imports it, except the rank's
side of the control plane (`control.keeper`, the keeper process and `control.timing`),
which every layer may import and which imports only the base modules.
"""
