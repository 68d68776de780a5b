"""How MXNet is changed, all of it installed by `import mxkv_hybrid`: the Gluon Trainer and
Module hooks (`hooks`: the string 'hybrid' honoured, parameters made equal before the first
step, the averaging modes' after-update, `consensus`), the patching helpers they share
(`patching`), `mxkv-launch --auto` for scripts with no kvstore flag (`auto`), every rank
ending an epoch at the same step (`even_batches`), one rank's share of a shuffled data
set (`shard_sampler`), and the GPUs of each rank (`gpus`).

The only layer that changes MXNet's own classes and functions. It sits on the store:
may import the root's `kvstore`, and `observe/`, `modes/`, `ps/`, `safety/`, `comm/`,
`config`, `capabilities`, `errors` and `atomic_file`.
"""
