"""Everything that talks to or runs on MXNet's own ps-lite parameter server: the group
leaders' client (`client`: one dist kvstore per process, its traffic counted, its calls
under a watchdog), where bytes land on the servers and a layout that balances them
(`layout`), the int keys a store's keys get on the servers (`keys`), the optimizers that
run inside the servers (`optimizers`), where separate group jobs meet at the end
(`finish_line`), where every ps-lite node of a job listens when relays carry ps-lite
between hosts, with each host's relay plan (`node_addresses`), and the server and scheduler
processes themselves (`server`, started by
`mxkv-launch` as `python -m mxkv_hybrid.ps.server`; `scheduler`, run as a script on
libmxnet alone).

May import `safety/`, `comm/` and the root's `config`, `errors` and `atomic_file`.
"""
