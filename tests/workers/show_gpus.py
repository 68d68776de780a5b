"""Prints what this rank was given (--gpus, after mxkv-launch --auto) and what
mxkv_hybrid.rank_gpus makes of a list (--pick)."""

import argparse

import mxkv_hybrid

parser = argparse.ArgumentParser()
parser.add_argument("--gpus", default="")
parser.add_argument("--pick", default="")
args = parser.parse_args()
here = mxkv_hybrid.world()
print(
    f"local rank {here.local_rank} of {here.local_size}: --gpus {args.gpus!r}, "
    f"rank_gpus({args.pick!r}) = {mxkv_hybrid.rank_gpus(args.pick)}"
)
