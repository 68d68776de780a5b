"""Communication inside the MPI job: the world and its groups (`topology`), the Python face
of the C++ tensor collectives in `csrc/` (`collectives`, the extension `_C`), which
algorithm runs at which size (`algorithm_table`, the shipped `allreduce_table.json`), the
private communicator of the ranks that step together (`lockstep`), the emulated slow link
between groups (`link_throttle`), and the two instruments every blocking collective runs
under: the stall monitor (`stall`) and the timeline recorder (`timeline`). They live here,
not in `safety/` or `observe/`, because the collectives themselves use them.

The lowest layer above the root's `config`, `capabilities`, `errors` and `atomic_file`: it
imports nothing else from the package.
"""
