"""The averaging algorithms written out in numpy (float64), step by step, for the tests to
compare with what tests/workers/averaging_steps.py prints."""

from typing import Callable, List, Optional

import numpy as np

START = np.array([2.0, -1.0, 0.5])
Rounding = Callable[[np.ndarray], np.ndarray]
LEARNING_RATE, MOMENTUM = 0.1, 0.5


def targets(ranks: int) -> np.ndarray:
    return np.array([[r + 1.0, -2.0 * r, 0.5 * r] for r in range(ranks)])


def optimizer_step(w: np.ndarray, mom: np.ndarray, grad: np.ndarray, optimizer: str):
    """MXNet 1.9.1's sgd_mom_update / nag_mom_update (no weight decay)."""
    mom = MOMENTUM * mom - LEARNING_RATE * grad
    if optimizer == "sgd":
        return w + mom, mom
    return w + MOMENTUM * mom - LEARNING_RATE * grad, mom


def momentum_of(outer_lr: float, outer_momentum: Optional[float]) -> float:
    """The outer momentum a job runs with: MXKV_OUTER_MOMENTUM, else its rule 1 - lr."""
    return max(0.0, 1.0 - outer_lr) if outer_momentum is None else outer_momentum


def is_averaging_point(step: int, warmup: int, tau: int) -> bool:
    return step > warmup and (step - warmup) % tau == 0


def easgd_sync(
    steps: int,
    groups: int,
    tau: int,
    warmup: int,
    alpha: float,
    optimizer: str,
    outer: str = "none",
    outer_lr: float = 0.7,
    outer_momentum: Optional[float] = None,  # None: MXKV_OUTER_MOMENTUM's rule, 1 - lr
) -> List[dict]:
    """Synchronous EASGD with one rank per group: [{weights, centre} after each step].
    With an outer optimizer the centre takes its step on the sum E of the elastic
    differences: M = mu M + E, c += lr (E + mu M) (nesterov) or lr M (sgd)."""
    goal = targets(groups)
    x = np.tile(START, (groups, 1))
    mom = np.zeros_like(x)
    centre = START.copy()
    velocity = np.zeros_like(START)
    records = []
    for step in range(1, steps + 1):
        x, mom = optimizer_step(x, mom, x - goal, optimizer)
        if is_averaging_point(step, warmup, tau):
            elastic = alpha * (x - centre)
            x, move = x - elastic, elastic.sum(axis=0)
            if outer != "none":
                velocity = momentum_of(outer_lr, outer_momentum) * velocity + move
                move = outer_lr * (
                    move + momentum_of(outer_lr, outer_momentum) * velocity
                    if outer == "nesterov"
                    else velocity
                )
            centre = centre + move
        records.append({"weights": x.copy(), "centre": centre.copy()})
    return records


def lasgd(
    steps: int, ranks: int, tau: int, warmup: int, overlap: bool, optimizer: str
) -> List[dict]:
    """Local SGD after synchronous warm-up steps; with overlap the average started at one
    point is applied at the next (x += A - S). [{weights, pending}] after each step."""
    goal = targets(ranks)
    x = np.tile(START, (ranks, 1))
    mom = np.zeros_like(x)
    snapshot = average = None
    records = []
    for step in range(1, steps + 1):
        grad = x - goal
        if step <= warmup:  # gradients averaged over all ranks
            grad = np.tile(grad.mean(axis=0), (ranks, 1))
        x, mom = optimizer_step(x, mom, grad, optimizer)
        if is_averaging_point(step, warmup, tau):
            if not overlap:
                x = np.tile(x.mean(axis=0), (ranks, 1))
            else:
                if snapshot is not None:
                    x = x + average - snapshot
                snapshot, average = x.copy(), x.mean(axis=0)
        records.append(
            {"weights": x.copy(), "pending": None if snapshot is None else average - snapshot}
        )
    return records


def lasgd_outer(
    steps: int,
    ranks: int,
    tau: int,
    warmup: int,
    optimizer: str,
    outer: str,
    outer_lr: float,
    outer_momentum: float,
) -> List[dict]:
    """Blocking lasgd with an outer optimizer (modes/outer_optimizer.py): at each averaging
    point delta = anchor - mean(x), m = mu m + delta, anchor -= lr (delta + mu m)
    (nesterov) or lr m (sgd), and every rank goes on from the anchor. [{weights}]."""
    goal = targets(ranks)
    x = np.tile(START, (ranks, 1))
    mom = np.zeros_like(x)
    anchor, velocity = START.copy(), np.zeros_like(START)
    records = []
    for step in range(1, steps + 1):
        grad = x - goal
        if step <= warmup:
            grad = np.tile(grad.mean(axis=0), (ranks, 1))
        x, mom = optimizer_step(x, mom, grad, optimizer)
        if step == warmup:  # every rank holds the same model
            anchor = x[0].copy()
        if is_averaging_point(step, warmup, tau):
            delta = anchor - x.mean(axis=0)
            velocity = outer_momentum * velocity + delta
            anchor = anchor - outer_lr * (
                delta + outer_momentum * velocity if outer == "nesterov" else velocity
            )
            x = np.tile(anchor, (ranks, 1))
        records.append({"weights": x.copy()})
    return records


def streaming_lasgd(
    steps: int,
    ranks: int,
    tau: int,
    warmup: int,
    overlap: bool,
    optimizer: str,
    fragments: int,
    outer: str = "none",
    outer_lr: float = 0.7,
    outer_momentum: Optional[float] = None,  # None: MXKV_OUTER_MOMENTUM's rule, 1 - lr
    round16: Optional[Rounding] = None,
    offset: float = 0.0,
    feedback: bool = True,
) -> List[dict]:
    """lasgd with the model's elements cut into `fragments` equal ranges (Streaming DiLoCo,
    modes/fragments.py): a point every tau / fragments steps averages the next fragment
    only, plainly or through the outer optimizer; overlapped, the average is applied at
    the next point (x += A' - S, A' the outer step's new model, or A). [{weights,
    consensus, change}] after each step; consensus: the pending average applied, then the
    mean. With round16 (modes/rounded_deltas.py) each rank's change since the anchor, plus
    its residual, is rounded before the (exact) mean (rounded in 1-bit codes: round16 takes
    the ranks' rows; feedback=False drops the residual), and coded_consensus is the
    consensus averaged so; change: the largest such change rounded at this step. offset
    moves the start and every target by that much."""
    goal = targets(ranks) + offset
    x = np.tile(START + offset, (ranks, 1))
    mom = np.zeros_like(x)
    bounds = [f * START.size // fragments for f in range(fragments + 1)]
    anchor, velocity = START + offset, np.zeros_like(START)
    residual = np.zeros_like(x)
    pending = None  # (elements, S, A) of the average in flight
    changes: List[float] = []

    def mean_of(part: slice, models: np.ndarray) -> np.ndarray:
        if round16 is None:
            return models.mean(axis=0)
        change = anchor[part] - models + residual[:, part]
        sent = round16(change.astype(np.float32)).astype(np.float64)
        residual[:, part] = change - sent if feedback else 0.0
        changes.append(float(np.abs(change).max()))
        return anchor[part] - sent.mean(axis=0)

    def outer_step(part: slice, mean: np.ndarray) -> np.ndarray:
        if outer == "none":
            anchor[part] = mean  # the model every rank shares after the point
            return mean
        delta = anchor[part] - mean
        velocity[part] = momentum_of(outer_lr, outer_momentum) * velocity[part] + delta
        anchor[part] -= outer_lr * (
            delta + momentum_of(outer_lr, outer_momentum) * velocity[part]
            if outer == "nesterov"
            else velocity[part]
        )
        return anchor[part].copy()

    records = []
    for step in range(1, steps + 1):
        grad = x - goal
        if step <= warmup:
            grad = np.tile(grad.mean(axis=0), (ranks, 1))
        x, mom = optimizer_step(x, mom, grad, optimizer)
        if step == warmup:
            anchor = x[0].copy()
        interval = tau // fragments
        if step > warmup and (step - warmup) % interval == 0:
            fragment = ((step - warmup) // interval - 1) % fragments
            part = slice(bounds[fragment], bounds[fragment + 1])
            if not overlap:
                x[:, part] = outer_step(part, mean_of(part, x[:, part]))
            else:
                if pending is not None:
                    flying, snapshot, average = pending
                    x[:, flying] += outer_step(flying, average) - snapshot
                pending = (part, x[:, part].copy(), mean_of(part, x[:, part]))
        agreed = x.copy()
        saved = anchor.copy(), velocity.copy(), residual.copy()
        if pending is not None:  # what consensus would apply (on copies of the outer state)
            flying, snapshot, average = pending
            agreed[:, flying] += outer_step(flying, average) - snapshot
        coded = None
        if round16 is not None:  # consensus averages as every point does
            coded = mean_of(slice(0, START.size), agreed)
            changes.pop()  # (its change is no step's)
        anchor[:], velocity[:], residual[:] = saved
        records.append(
            {
                "weights": x.copy(),
                "consensus": agreed.mean(axis=0),
                "coded_consensus": coded,
                "change": max(changes, default=0.0),
            }
        )
        changes.clear()
    return records


def consensus_of_lasgd(record: dict, overlap: bool) -> np.ndarray:
    """What consensus gives after a lasgd step: the pending average applied, then the mean."""
    x = record["weights"]
    if overlap and record["pending"] is not None:
        x = x + record["pending"]
    return x.mean(axis=0)
