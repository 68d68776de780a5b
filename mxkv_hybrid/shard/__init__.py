"""Shard parallelism for training many models at once (after Hydra): each model is cut into
consecutive shards that fit one device (`partition`, from what each layer measures,
`footprint`), every shard's state lives in host memory spread over the ranks
(`spill_store`) and is loaded into the device budget of the rank that runs it
(`device_budget`), and idle ranks claim the ready shard task of the model with the
longest remaining work (`task_board`); `shard_program` runs one task, `background` moves
shards beside the computation, `model_chain` orders a model's tasks, `orchestrator` ties
them together, `model_task` is what a user describes, `utilisation` the report.

May import `comm/` (the world, remote memory) and the root's `config` and `errors`.
"""

from .model_task import ModelTask
from .orchestrator import ShardOrchestrator

__all__ = ["ModelTask", "ShardOrchestrator"]
