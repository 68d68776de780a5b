"""Makes ps-lite number the group leaders in reverse (the last group's leader ps-lite worker
0), so a test of separate group jobs cannot pass by the luck of group 0's leader being
worker 0. ps-lite's scheduler sorts the nodes by announced host name, descending, then by
port (van.cc, ProcessAddNodeCommandAtScheduler): group g announces loopback address
127.0.0.(1 + g). Does nothing outside a group job (MXKV_GROUP_JOB unset)."""

import os

from mxkv_hybrid.config import read_knob


def number_the_leaders_in_reverse() -> None:
    """Sets DMLC_NODE_HOST before the store is created (network.py keeps a value set)."""
    job = read_knob("MXKV_GROUP_JOB")
    if job is not None:
        os.environ["DMLC_NODE_HOST"] = f"127.0.0.{1 + job.group}"
