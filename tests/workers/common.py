"""Data and models shared by the test workers: deterministic per (rank, step)."""

import numpy as np

BATCH = 8  # samples per rank and step
CLASSES = 4
STEPS = 5
LEARNING_RATE = 0.1
MOMENTUM = 0.9


def rank_batch(rank: int, step: int):
    """The batch a given rank sees at a given step: (images N x 1 x 8 x 8, labels N)."""
    rng = np.random.RandomState(1000 * rank + step)
    x = rng.rand(BATCH, 1, 8, 8).astype(np.float32)
    y = rng.randint(0, CLASSES, BATCH).astype(np.float32)
    return x, y


def union_batch(num_ranks: int, step: int):
    """What one process sees when it trains on the batches of all ranks at once."""
    parts = [rank_batch(r, step) for r in range(num_ranks)]
    return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])


def overlapped_buckets(store) -> int:
    """How many buckets a Hybrid store reduced behind MXNet's engine (MXKV_OVERLAP=1)."""
    collectives = getattr(store, "_collectives", None)
    return collectives.overlapped_buckets if collectives is not None else 0


def staged_bytes() -> int:
    """Bytes this process's collectives copied between non-cpu devices and pinned buffers."""
    from mxkv_hybrid.comm.collectives import live_collectives

    return sum(c.staged_bytes for c in live_collectives())


def averaging_rounds(store) -> int:
    """Elastic exchanges (easgd) or model averagings (lasgd) a Hybrid store has done."""
    averaging = getattr(store, "averaging", None)
    return averaging.rounds if averaging is not None else 0


REGRESSION_FEATURES = 3
REGRESSION_WEIGHT = np.array([[1.0, -2.0, 0.5]], dtype=np.float32)  # y = x W^T + 0.3 + noise
REGRESSION_HALVES = ([0], [1, 2])  # the features of the first and the second half of the ranks


def regression_batches(rank: int, count: int, features=None):
    """`count` batches of a linear regression problem for one rank: x (BATCH x 3), y (BATCH x 1);
    with `features` (indices), the others are 0 in x (and so take no part in y)."""
    batches = []
    for step in range(count):
        rng = np.random.RandomState(100 * rank + step)
        x = rng.randn(BATCH, REGRESSION_FEATURES).astype(np.float32)
        if features is not None:
            x[:, [f for f in range(REGRESSION_FEATURES) if f not in features]] = 0
        y = x @ REGRESSION_WEIGHT.T + 0.3 + 0.1 * rng.randn(BATCH, 1).astype(np.float32)
        batches.append((x, y.astype(np.float32)))
    return batches
