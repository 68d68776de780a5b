"""Makes ps-lite number the group leaders in reverse (the last group's leader ps-lite worker
0), so a test of separate group jobs cannot pass by the luck of group 0's leader being
worker 0. ps-lite's scheduler sorts the nodes by announced host name, descending, then by
port (van.cc, ProcessAddNodeCommandAtScheduler): group g announces loopback address
127.0.0.(1 + g). Does nothing outside a group job (MXKV_GROUP_JOB unset)."""
import os


def number_the_leaders_in_reverse() -> None:
    """Sets DMLC_NODE_HOST before the store is created (network.py keeps a value set)."""
    knob = os.environ.get("MXKV_GROUP_JOB")
    if knob:
        group = int(dict(part.split("=") for part in knob.split(":"))["group"])
        os.environ["DMLC_NODE_HOST"] = f"127.0.0.{1 + group}"
