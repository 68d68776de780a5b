"""The five modes (MXKV_MODE), one file each, and what they share:

- `allreduce`: weights on the workers, gradients summed over all ranks (`worker_weights`);
- `sync`: the groups' sums joined by the parameter server, synchronously (`grouped_sync`,
  with the weights on the workers as in `allreduce`);
- `async`: weights held by the parameter servers, groups asynchronous (`server_weights`);
- `easgd`: elastic averaging with the centre variable on the servers (`elastic`);
- `lasgd`: local SGD with overlapped model averaging, no servers (`local_sgd`);
- what the averaging modes offer the store, hooks and checkpoints (`averaging`), and the
  explicit averagers for users who average by hand (`averagers`).

The store (`kvstore.Hybrid`) takes one mode's objects from `parts`; a mode sees arrays and
keys, not Trainers. What each mode can do is the root's `capabilities` table.
May import `ps/`, `safety/`, `comm/` and the root's `config`, `capabilities`, `errors` and
`atomic_file`.
"""
