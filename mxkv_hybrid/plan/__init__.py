"""The planner (`python -m mxkv_hybrid.plan`): an alpha-beta cost model of every mode and
allreduce algorithm on a described cluster (`cluster`, `collective_costs`, `mode_costs`),
the models' parameter sizes (`model_sizes`), compute times from a job's step summaries
(`summary_reader`), and the report that recommends a configuration (`report`).

May import `comm/` (the algorithm table) and the root's `config`, `capabilities` and `errors`.
"""
