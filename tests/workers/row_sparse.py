"""row_sparse through the store on every rank: pushpull, push/pull, init, row_sparse_pull,
an optimizer's lazy update (of a dense weight and of a row_sparse one), and the sparse
collective's two paths, each against a numpy reference built from every rank's data (each
rank draws its rows from its own seed, and can draw every other rank's too). One CHECK line
per verified fact."""

import mxnet as mx
import numpy as np

from mxkv_hybrid.errors import MXKVError

kv = mx.kv.create("hybrid")
rank, size = kv.rank, kv.num_workers
SHAPE = (1200, 1200)  # 5.8 MB dense in float32


def check(name, condition):
    print(f"CHECK {name} {'ok' if condition else 'FAILED'}", flush=True)


def rows_of(r, step, dtype, fraction=0.05, shape=SHAPE):
    """Rank r's random rows at `step`: (sorted ids, values)."""
    rng = np.random.default_rng([r, step])
    ids = np.sort(rng.choice(shape[0], int(fraction * shape[0]), replace=False))
    return ids.astype(np.int64), rng.standard_normal((len(ids),) + shape[1:]).astype(dtype)


def sparse(ids, values, shape=SHAPE):
    return mx.nd.sparse.row_sparse_array((values, ids), shape=shape, dtype=values.dtype)


def dense_sum(step, dtype, fraction=0.05, shape=SHAPE):
    """The sum over ranks (the store's calls sum, as every MXNet store)."""
    total = np.zeros(shape, np.float64)
    for r in range(size):
        ids, values = rows_of(r, step, dtype, fraction, shape)
        total[ids] += values
    return total


def union_ids(step, dtype, fraction=0.05, shape=SHAPE):
    return np.unique(
        np.concatenate([rows_of(r, step, dtype, fraction, shape)[0] for r in range(size)])
    )


TOLERANCE = {np.float32: 1e-5, np.float16: 2e-2}  # a sum of `size` normals, rounded per add

# pushpull: the sum over ranks, on the union of the rows
for step, dtype in enumerate((np.float32, np.float16)):
    grad = sparse(*rows_of(rank, step, dtype))
    out = mx.nd.sparse.zeros("row_sparse", SHAPE, dtype=dtype)
    kv.pushpull(f"g{step}", grad, out=out)
    name = np.dtype(dtype).name
    check(f"pushpull_rows_{name}", np.array_equal(out.indices.asnumpy(), union_ids(step, dtype)))
    check(
        f"pushpull_values_{name}",
        out.dtype == dtype
        and np.allclose(out.asnumpy(), dense_sum(step, dtype), atol=TOLERANCE[dtype]),
    )

# empty row sets: on every rank, and on all but rank 1
empty = mx.nd.sparse.zeros("row_sparse", SHAPE)
out = mx.nd.sparse.zeros("row_sparse", SHAPE)
kv.pushpull("empty", empty, out=out)
check("pushpull_empty_everywhere", out.indices.shape == (0,) and out.asnumpy().sum() == 0)
lone = sparse(np.array([7, 1100], np.int64), np.ones((2, SHAPE[1]), np.float32))
kv.pushpull("lone", lone if rank == 1 else empty, out=out)
check(
    "pushpull_one_rank_has_rows",
    np.array_equal(out.indices.asnumpy(), [7, 1100]) and np.allclose(out.data.asnumpy(), 1),
)

# the collective's two paths: little overlap -> allgather; the same rows everywhere -> union
# allreduce (N = size |U| >= 2 |U| from 2 ranks on); both the numpy sum
collectives = kv._collectives
for fraction, same_rows, expected in ((0.05, False, "allgather"), (0.5, True, "union allreduce")):
    ids, values = rows_of(0 if same_rows else rank, 9, np.float32, fraction)
    values = values * (rank + 1)
    array = sparse(ids, values)
    union, summed, path = collectives.sum_sparse_rows(
        "check", f"path-{expected}", array, ids, values, kv.config.average
    )
    reference = np.zeros(SHAPE)
    for r in range(size):
        r_ids, r_values = rows_of(0 if same_rows else r, 9, np.float32, fraction)
        reference[r_ids] += r_values * (r + 1)
    result = np.zeros(SHAPE)
    result[union] = summed
    divisor = size if kv.config.average else 1
    check(
        f"path_{expected.replace(' ', '_')}",
        path == expected and np.allclose(result, reference / divisor, atol=1e-5),
    )

# init of a row_sparse weight (rank 0's wins), row_sparse_pull of any rows, and the
# optimizer's lazy update: only the rows pushed move
weight0 = rows_of(0, 20, np.float32, 0.3)
kv.init("embedding", sparse(*rows_of(rank, 20, np.float32, 0.3)))
wanted = mx.nd.array(np.random.default_rng(rank).integers(0, SHAPE[0], 500), dtype=np.int64)
pulled = mx.nd.sparse.zeros("row_sparse", SHAPE)
kv.row_sparse_pull("embedding", out=pulled, row_ids=wanted)
initial = np.zeros(SHAPE)
initial[weight0[0]] = weight0[1]
asked = np.unique(wanted.asnumpy().astype(np.int64))
check(
    "init_then_row_sparse_pull",
    np.allclose(pulled.asnumpy()[asked], initial[asked])
    and not pulled.asnumpy()[np.setdiff1d(np.arange(SHAPE[0]), asked)].any(),
)

kv.set_optimizer(mx.optimizer.SGD(learning_rate=0.5))
kv.expect_row_sparse_gradients("dense_weight")  # servers: keep it row_sparse
kv.init("dense_weight", mx.nd.ones(SHAPE))
for step in (21, 22):
    kv.push("dense_weight", sparse(*rows_of(rank, step, np.float32)))
kv.barrier()  # async: every group's gradients applied
full = mx.nd.zeros(SHAPE)
kv.pull("dense_weight", out=full)
expected = 1 - 0.5 * (dense_sum(21, np.float32) + dense_sum(22, np.float32))
check("optimizer_on_sparse_gradients", np.allclose(full.asnumpy(), expected, atol=1e-5))

# a row_sparse weight (every row listed, as a Trainer's are) updated by row_sparse
# gradients; the rows any rank asks for, pulled
table = np.random.default_rng(23).standard_normal(SHAPE).astype(np.float32)
kv.init("table", sparse(np.arange(SHAPE[0]), table))
kv.push("table", sparse(*rows_of(rank, 23, np.float32)))
kv.barrier()
kv.row_sparse_pull("table", out=pulled, row_ids=wanted)
expected = table - 0.5 * dense_sum(23, np.float32)
check(
    "optimizer_on_a_row_sparse_weight",
    np.allclose(pulled.asnumpy()[asked], expected[asked], atol=1e-5)
    and np.array_equal(pulled.indices.asnumpy(), asked),
)

# a row_sparse gradient of a dense weight nobody declared: the workers' optimizer updates
# the rows pushed; the servers (which keep the weight dense) refuse it, naming the fix
kv.init("undeclared", mx.nd.ones(SHAPE))
try:
    kv.push("undeclared", sparse(*rows_of(rank, 24, np.float32)))
    kv.barrier()
    kv.pull("undeclared", out=full)
    check(
        "row_sparse_gradient_of_a_dense_weight",
        kv.config.mode not in ("sync", "async")
        and np.allclose(full.asnumpy(), 1 - 0.5 * dense_sum(24, np.float32), atol=1e-5),
    )
except MXKVError as err:
    print(err, flush=True)
    check(
        "row_sparse_gradient_of_a_dense_weight",
        kv.config.mode in ("sync", "async")
        and "kv.expect_row_sparse_gradients(keys) before init" in str(err),
    )

kept = mx.nd.sparse.zeros("row_sparse", SHAPE)
kv.pull("embedding", out=kept)  # ignore_sparse=True: a row_sparse out is left alone
check("pull_ignores_row_sparse_outs", kept.indices.shape == (0,))
kv.pull("embedding", out=kept, ignore_sparse=False)
check("pull_row_sparse_whole", np.allclose(kept.asnumpy(), initial))

for name, call in (
    (
        "row_sparse_pull_into_dense",
        lambda: kv.row_sparse_pull("embedding", out=mx.nd.zeros(SHAPE), row_ids=wanted),
    ),
    (
        "row_sparse_pull_uninitialised",
        lambda: kv.row_sparse_pull("nothing", out=pulled, row_ids=wanted),
    ),
):
    try:
        call()
        check(name, False)
    except MXKVError as err:
        print(err, flush=True)
        check(name, True)
kv.close()
