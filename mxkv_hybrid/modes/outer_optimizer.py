"""An outer optimizer for the averaging modes (DiLoCo, Douillard et al. 2023; SlowMo, Wang
et al. 2020). lasgd: at each averaging point the change of the averaged model since the
last one is taken as a gradient of the model every rank shared then (the anchor, theta):

    delta = theta - mean(x)              (the outer gradient)
    m = mu * m + delta                   (its momentum)
    theta -= lr * (delta + mu * m)       (MXKV_OUTER=nesterov)
    theta -= lr * m                      (MXKV_OUTER=sgd)

and every rank starts the next local steps from the new theta. With lr 1 and mu 0 it is
plain averaging. With MXKV_FRAGMENTS each fragment takes its outer steps at its own
points (the anchor is the whole model's; the momentum is each piece's).

easgd: the centre c is the outer model, and the groups' elastic differences e (the
centre's plain move is c += sum of e) its negative gradient. Each leader keeps the
momentum of its own e and sends lr (e + mu m) (nesterov) or lr m (sgd) instead of e;
the momentum is linear, so when all groups exchange at once (MXKV_EASGD_SYNC=1) the
centre takes exactly the outer step of the sum of the e; asynchronous groups each give
their own moves momentum. The learning rate is DiLoCo's 0.7 (MXKV_OUTER_LR); the momentum
(MXKV_OUTER_MOMENTUM) is by default the rule of rule_momentum, not DiLoCo's 0.9."""

import logging
from typing import Dict, Sequence

import mxnet as mx

from ..comm.collectives import Arrays, Key
from ..config import Config
from ..logs import TO_STDERR
from .fragments import Piece

log = logging.getLogger(__name__)


class OuterOptimizer:
    """The anchor (lasgd) and the outer momentum of every weight."""

    def __init__(self, kind: str, learning_rate: float, momentum: float):
        self.kind, self.learning_rate, self.momentum = kind, learning_rate, momentum
        self._anchor: Dict[Key, mx.nd.NDArray] = {}
        self._velocity: Dict[Key, mx.nd.NDArray] = {}

    def anchor(self, keys: Sequence[Key], weights: Sequence[mx.nd.NDArray]) -> None:
        """The model every rank shares now (after the first broadcast, after the warm-up)."""
        for key, weight in zip(keys, weights):
            self._anchor[key] = weight.copy()

    def anchor_of(self, piece: Piece) -> mx.nd.NDArray:
        """The anchor's elements of `piece` (a view: the anchor's own memory)."""
        return piece.view(self._anchor[piece.key])

    def step(self, pieces: Sequence[Piece], averages: Sequence[Arrays]) -> None:
        """lasgd: `averages[i]` hold the mean of the ranks' piece i of the model (a whole
        weight or a fragment's part of one); each becomes that piece of the new anchor."""
        for piece, copies in zip(pieces, averages):
            anchor = self.anchor_of(piece)
            direction = self._direction(
                piece.name, anchor - copies[0].as_in_context(anchor.context)
            )
            anchor -= self.learning_rate * direction  # in place: a view writes into the anchor
            for copy in copies:
                anchor.copyto(copy)

    def scale_moves(self, keys: Sequence[Key], moves: Sequence[mx.nd.NDArray]) -> None:
        """easgd: each of this leader's elastic differences e becomes, in place, the move
        it sends the centre: lr (e + mu m) or lr m, after m = mu m + e."""
        for key, move in zip(keys, moves):
            move[:] = self.learning_rate * self._direction(key, move)

    def _direction(self, name: Key, delta: mx.nd.NDArray) -> mx.nd.NDArray:
        """Updates the momentum of `name` by `delta`; the step's direction."""
        velocity = self._velocity.get(name)
        velocity = delta.copy() if velocity is None else self.momentum * velocity + delta
        self._velocity[name] = velocity
        return delta + self.momentum * velocity if self.kind == "nesterov" else velocity

    def state(self) -> dict:
        return {
            "anchor": {k: v.asnumpy() for k, v in self._anchor.items()},
            "velocity": {k: v.asnumpy() for k, v in self._velocity.items()},
        }

    def load_state(self, state: dict) -> None:
        self._anchor = {k: mx.nd.array(v, dtype=v.dtype) for k, v in state["anchor"].items()}
        self._velocity = {k: mx.nd.array(v, dtype=v.dtype) for k, v in state["velocity"].items()}


def rule_momentum(learning_rate: float) -> float:
    """MXKV_OUTER_MOMENTUM's default: 1 - lr (at least 0). Once the momentum has built
    up, a Nesterov step is lr / (1 - mu) times the averaged change (an sgd step lr /
    (1 - mu) too), so this rule keeps it at 1, plain averaging's, while the momentum
    smooths it. The sweep of examples/defaults_sweep.py MXKV_OUTER_MOMENTUM chose it:
    DiLoCo's 0.9 (7x at lr 0.7) diverged on digits at tau 8 and 32."""
    return max(0.0, 1.0 - learning_rate)


def outer_optimizer_of(config: Config, announce: bool) -> OuterOptimizer:
    """The job's outer optimizer (config.outer not "none"); the momentum by the rule
    unless MXKV_OUTER_MOMENTUM is set, which rank 0 (`announce`) says at start."""
    momentum = config.outer_momentum
    if momentum is None:
        momentum = rule_momentum(config.outer_lr)
        if announce:
            log.info(
                f"mxkv_hybrid: MXKV_OUTER={config.outer} runs with lr {config.outer_lr:g}"
                f" and momentum {momentum:g} = max(0, 1 - lr), MXKV_OUTER_MOMENTUM's rule"
                " (a steady step of lr / (1 - momentum) = "
                f"{config.outer_lr / (1 - momentum):g}x the averaged change; set "
                "MXKV_OUTER_MOMENTUM to choose another)",
                extra=TO_STDERR,
            )
    return OuterOptimizer(config.outer, config.outer_lr, momentum)
