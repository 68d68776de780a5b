"""Cells of the Trainer-rules table (tests/tables/trainer_rules.py): a Gluon Trainer over one
embedding weight of the given weight and gradient storage types and update_on_kvstore,
one training step, then (where the step ran) the parameter loaded again, as
`load_parameters` does. Prints one line per cell: `cell <json>` with what the Trainer
decided (update_on_kvstore, or the error type it raised) and what the load did.

`--reference TYPE` runs every cell on MXNet's own KVStore answering to TYPE (dist_sync,
dist_async; `dist_sync_p3` is dist_sync over the P3 van, MXNet's store that cannot run the
optimizer), in a process that never imports mxkv_hybrid: MXNet 1.9.1's own decisions,
with no servers (the store is a local one that reports the dist type). Without it, one
cell runs on `kvstore='hybrid'` in the job's MXKV_MODE."""

import argparse
import json

import mxnet as mx
from mxnet import autograd, gluon

ROWS, COLUMNS = 6, 3
STYPES = ("default", "row_sparse")
UPDATE_ON_KVSTORE = {"None": None, "True": True, "False": False}
RULE_ERRORS = (ValueError, RuntimeError, AssertionError, TypeError)  # what MXNet's rules raise


def reference_store(kind: str) -> mx.kv.KVStore:
    """A local MXNet KVStore that answers `type` as a dist store of `kind`."""
    dist_type = kind.replace("_p3", "")

    class Answering(mx.kv.KVStore):
        @property
        def type(self):
            return dist_type

        def set_optimizer(self, optimizer):  # a dist store's rank 0 would send it to servers
            self._set_updater(mx.optimizer.get_updater(optimizer))

    store = mx.kv.create("local")
    store.__class__ = Answering
    store._is_p3 = kind.endswith("_p3")
    return store


def run_cell(store, weight: str, gradient: str, update_on_kvstore) -> dict:
    """What the Trainer decides, and what loading the parameter after one step does."""
    param = gluon.Parameter("weight", shape=(ROWS, COLUMNS), stype=weight, grad_stype=gradient)
    param.initialize(mx.init.Constant(0.5), ctx=mx.cpu())
    trainer = gluon.Trainer(
        [param], "sgd", {"learning_rate": 0.1}, kvstore=store, update_on_kvstore=update_on_kvstore
    )
    rows = mx.nd.array([1, 4])
    try:
        with autograd.record():
            data = param.row_sparse_data(rows) if weight == "row_sparse" else param.data()
            loss = mx.nd.Embedding(
                rows, data, ROWS, COLUMNS, sparse_grad=gradient == "row_sparse"
            ).sum()
        loss.backward()
        trainer.step(1)
    except RULE_ERRORS as error:  # the decision is the error MXNet's rules raise
        return {"decision": error_type(error), "load": "-", "message": str(error)}
    decision = f"update_on_kvstore={trainer._update_on_kvstore}"
    try:
        param.set_data(mx.nd.ones((ROWS, COLUMNS)))
    except RULE_ERRORS as error:
        return {"decision": decision, "load": error_type(error), "message": str(error)}
    return {"decision": decision, "load": "reset" if not trainer._kv_initialized else "loaded"}


def error_type(error: Exception) -> str:
    """The built-in error types `error` is an instance of (what a caller catches; MXNet
    raises those), as 'ValueError' or 'RuntimeError|ValueError'."""
    general = (Exception, BaseException, object)
    builtin = {c.__name__ for c in type(error).__mro__ if c.__module__ == "builtins"}
    return "|".join(sorted(builtin - {c.__name__ for c in general}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--reference", choices=["dist_sync", "dist_async", "dist_sync_p3"])
    parser.add_argument(
        "--cell",
        metavar="WEIGHT,GRADIENT,UPDATE_ON_KVSTORE",
        help="one cell (default: every cell, each with a store of its own)",
    )
    args = parser.parse_args()
    if args.reference:
        store = lambda: reference_store(args.reference)  # noqa: E731
    else:
        import mxkv_hybrid  # noqa: F401  (kvstore='hybrid')

        store = lambda: "hybrid"  # noqa: E731
    cells = (
        [tuple(args.cell.split(","))]
        if args.cell
        else [(w, g, u) for w in STYPES for g in STYPES for u in UPDATE_ON_KVSTORE]
    )
    for weight, gradient, update in cells:
        outcome = run_cell(store(), weight, gradient, UPDATE_ON_KVSTORE[update])
        cell = {"weight": weight, "gradient": gradient, "update_on_kvstore": update}
        print("cell", json.dumps({**cell, **outcome}), flush=True)


if __name__ == "__main__":
    main()
