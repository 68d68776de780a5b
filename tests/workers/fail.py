"""Failure rehearsals for the launcher: `raise` (rank 1 raises while the others wait in a
collective), `hang` (rank 1 never joins the collective), `leave` (a group job's group 1
exits before it creates its store, so before the groups meet at the parameter server) or
`early R` (rank R of the whole job exits 1 before it creates its store; the others wait in
theirs) or `done R` (the same with status 0: it has nothing to do)."""

import os
import sys
import time

import mxnet as mx

from mxkv_hybrid.config import parse_group_job
from mxkv_hybrid.launch.control.keeper import rank_in_job

if sys.argv[1] == "leave" and parse_group_job(os.environ["MXKV_GROUP_JOB"]).group == 1:
    raise SystemExit("group 1 cannot read its data")
if sys.argv[1] == "early" and rank_in_job() == int(sys.argv[2]):
    raise SystemExit(f"rank {sys.argv[2]} cannot read its data")
if sys.argv[1] == "done" and rank_in_job() == int(sys.argv[2]):
    raise SystemExit(0)
kv = mx.kv.create("hybrid")
if kv.rank == 1:
    if sys.argv[1] == "raise":
        raise RuntimeError("rank 1 fails on purpose")
    if sys.argv[1] == "hang":
        time.sleep(3600)
kv.pushpull(0, mx.nd.ones((3,)))
