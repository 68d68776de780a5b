"""The integration into MXNet's Gluon Trainer and Module, installed on import.

What changes, only for the hybrid store (every other store runs MXNet's own code):
- `kvstore='hybrid'` as a string is honoured with one device per process (MXNet's
  `_create_kvstore` otherwise drops a non-'dist' string store when there is one device);
- Trainer and Module reduce all gradients of a step in one fused pushpull;
- parameters are broadcast from rank 0 as soon as they are initialised (Trainer:
  at construction and at deferred initialisation; Module: at init_optimizer), so
  every rank runs its first forward pass on identical weights;
- after each optimizer step (Trainer `_update`, Module `_update_params`) the averaging
  modes (easgd, lasgd) count the step and, on their schedule, average;
- `Module.fit` wraps its train_data in an EvenBatchesIter: the epochs end on every rank
  at the same step when the ranks' shards hold different numbers of batches;
- row_sparse weights and gradients pass MXNet's gates, which admit only its own store
  class: `_create_sparse_kvstore` takes the hybrid store (updates on the store), and a
  Trainer with dense weights and row_sparse gradients follows MXNet's dense rules;
- otherwise the Trainer keeps MXNet's rules for the dist store each mode stands in for
  (docs/reference/trainer-rules.md): the same update_on_kvstore, the same error types;
- Trainer `save_states`/`load_states` and Module `save/load_optimizer_states` also
  write/read the averaging state next to the optimizer states.
"""

import os
import pickle

import mxnet as mx
import mxnet.gluon.parameter
import mxnet.gluon.trainer
import mxnet.kvstore
import mxnet.model
import mxnet.module.base_module
import mxnet.module.module

from ..atomic_file import write_atomically
from ..capabilities import capabilities_of, modes_with
from ..errors import MXKVError
from ..kvstore import Hybrid
from ..safety.divergence_guard import record_heads
from . import auto, store_names
from .even_batches import EvenBatchesIter
from .patching import bind_call, patch

AVERAGING_SUFFIX = ".averaging"  # next to an optimizer-states file: the averaging state

_MODULES_USING_CREATE = (mxnet.model, mxnet.gluon.trainer, mxnet.module.module)
_MODULES_USING_UPDATES = (mxnet.model, mxnet.module.module)


def _names_hybrid(kvstore) -> bool:
    """'hybrid', or under --auto a default store name that becomes 'hybrid'."""
    return isinstance(kvstore, str) and (
        kvstore.lower() == Hybrid.__name__.lower() or auto.replaces_store(kvstore)
    )


def _fit(original, self, *args, **kwargs):
    """Module.fit: with the hybrid store the epochs end on every rank at the same step."""
    call = bind_call(original, self, *args, **kwargs)
    given = call.arguments
    store = given["kvstore"]
    if (_names_hybrid(store) or isinstance(store, Hybrid)) and not isinstance(
        given["train_data"], EvenBatchesIter
    ):
        given["train_data"] = EvenBatchesIter(given["train_data"])
    return original(*call.args, **call.kwargs)


def _create(original, name="local", *args, **kwargs):
    """mx.kv.create: --auto's renaming, then the check that the store reaches other ranks."""
    name = auto.store_name(name)
    store_names.check(name)
    return original(name, *args, **kwargs)


def _create_kvstore(original, kvstore, num_device, arg_params):
    store_names.check(kvstore)  # (with one device MXNet creates no 'local' store at all)
    if _names_hybrid(kvstore):
        kvstore = mx.kv.create(kvstore)
    return original(kvstore, num_device, arg_params)


def _create_sparse_kvstore(original, kvstore):
    """MXNet's store for row_sparse weights, which it updates on the store: MXNet accepts
    only its native KVStore class, so the hybrid store is let through here."""
    if _names_hybrid(kvstore):
        kvstore = mx.kv.create(kvstore)
    if not isinstance(kvstore, Hybrid):
        return original(kvstore)
    if not kvstore.is_capable(mx.kv.KVStoreBase.OPTIMIZER):
        raise SparseWeightsNeedStoreUpdates(
            f"row_sparse weights are updated on the store, which MXKV_MODE="
            f"{kvstore.config.mode} does not do (each rank updates its own "
            f"weights): use MXKV_MODE={' / '.join(modes_with('updates_on_store'))}, or a "
            "dense weight (stype='default') with sparse gradients"
        )
    return kvstore, True


def _init_trainer_kvstore(original, self):
    """Trainer._init_kvstore: with the hybrid store, update_on_kvstore=False is refused
    where MXNet refuses it for a dist store (ValueError, at the same point): in a mode
    whose updates run on the servers (dist_async), and with row_sparse gradients where
    the store can update (dist_sync). Dense weights with row_sparse gradients otherwise
    follow MXNet's rules for dense ones (update_on_kvstore by default where the mode can),
    since the store updates weights with row_sparse gradients; MXNet would refuse any
    store but its own."""
    store = _trainer_store(self)
    sparse_grad_only = self._contains_sparse_grad and not self._contains_sparse_weight
    if store is not None and self._kvstore_params["update_on_kvstore"] is False:
        _refuse_local_updates_in_async(store)
        if sparse_grad_only and store.is_capable(mx.kv.KVStoreBase.OPTIMIZER):
            raise SparseLocalUpdatesRefused(
                "Cannot set update_on_kvstore=False on dist kvstore when sparse gradients "
                f"are present: MXNet's Trainer refuses it for dist_sync, and MXKV_MODE="
                f"{store.config.mode} keeps its rules; leave update_on_kvstore unset (the "
                "store updates the weights), or use a dense gradient"
            )
    if not (sparse_grad_only and store is not None):
        return original(self)
    self._contains_sparse_grad = False
    try:
        return original(self)
    finally:
        self._contains_sparse_grad = True


def _initialize_kvstore(
    original, kvstore, param_arrays, arg_params, param_names, update_on_kvstore
):
    if not isinstance(kvstore, Hybrid):
        return original(kvstore, param_arrays, arg_params, param_names, update_on_kvstore)
    kvstore.broadcast_weights(
        list(param_names), [arg_params[n] for n in param_names], out=param_arrays
    )
    return None


class SparseWeightsNeedStoreUpdates(MXKVError, AssertionError):
    """row_sparse weights in a mode whose store does not run the optimizer: the
    AssertionError MXNet's _create_sparse_kvstore raises for such a store."""


class LocalUpdatesRefused(MXKVError, ValueError):
    """update_on_kvstore=False where the updates run on the servers: the ValueError that
    MXNet's Trainer raises for dist_async."""


class SparseLocalUpdatesRefused(MXKVError, ValueError):
    """update_on_kvstore=False with row_sparse gradients where the store can update: the
    ValueError that MXNet's Trainer raises for dist_sync."""


def _refuse_local_updates_in_async(kvstore: Hybrid) -> None:
    mode = kvstore.config.mode
    if capabilities_of(mode).updates_only_on_servers:
        raise LocalUpdatesRefused(
            "Please set update_on_kvstore=True when training in async mode: "
            f"MXKV_MODE={mode} applies the updates on the parameter servers, but this "
            "Trainer/Module updates on the workers: use update_on_kvstore=True (the "
            "default; for Module unset MXNET_UPDATE_ON_KVSTORE=0)"
        )


def _reset_trainer_kvstore(original, self):
    """Trainer._reset_kvstore (parameters loaded once the store holds them, with
    update_on_kvstore): refused in every mode, as MXNet refuses it for a dist store
    (RuntimeError); the servers or the store would overwrite what was loaded."""
    store = self._kvstore
    if isinstance(store, Hybrid):
        holder = (
            "the parameter servers hold these weights"
            if store.weights_on_servers
            else "the store keeps these weights and runs the optimizer on them"
        )
        raise RuntimeError(
            f"Cannot reset distributed KVStore: {holder} (MXKV_MODE={store.config.mode}, "
            "update_on_kvstore=True), as dist_sync's servers do, and would overwrite what "
            "was loaded; load the parameters before the Trainer's first step "
            "(mxkv_hybrid.checkpoint.load does), or train with update_on_kvstore=False"
        )
    return original(self)


def _valid_updates(param_arrays, grad_arrays, param_names):
    valid = [i for i, grads in enumerate(grad_arrays) if grads[0] is not None]
    return (
        [param_names[i] for i in valid],
        [grad_arrays[i] for i in valid],
        [param_arrays[i] for i in valid],
    )


def _update_params_on_kvstore(original, param_arrays, grad_arrays, kvstore, param_names):
    if not isinstance(kvstore, Hybrid):
        return original(param_arrays, grad_arrays, kvstore, param_names)
    names, grads, params = _valid_updates(param_arrays, grad_arrays, param_names)
    kvstore.pushpull_gradients(names, grads, out=params)
    return None


def _update_params(
    original, param_arrays, grad_arrays, updater, num_device, kvstore=None, param_names=None
):
    if not isinstance(kvstore, Hybrid):
        return original(param_arrays, grad_arrays, updater, num_device, kvstore, param_names)
    _refuse_local_updates_in_async(kvstore)
    names, grads, params = _valid_updates(param_arrays, grad_arrays, param_names)
    kvstore.pushpull_gradients(names, grads)
    # reduced: the local updates need no store
    result = original(param_arrays, grad_arrays, updater, num_device, None, param_names)
    kvstore.after_update(names, params)
    return result


def _trainer_store(trainer):
    """The Hybrid store a Trainer was given (created from the string if needed), or None."""
    params = getattr(trainer, "_kvstore_params", None) or {}
    kvstore = params.get("kvstore")
    if _names_hybrid(kvstore):
        kvstore = params["kvstore"] = mx.kv.create(kvstore)
    return kvstore if isinstance(kvstore, Hybrid) else None


def _broadcast_parameters(store: Hybrid, trainer, params) -> None:
    """Dense parameters only: the Trainer itself inits row_sparse ones (rank 0's kept).
    The store learns first which have row_sparse gradients (the servers keep those
    row_sparse)."""
    params = [p for p in params if p._stype == "default"]
    keys = [trainer._param2idx[p.name] for p in params]
    sparse_gradients = [k for k, p in zip(keys, params) if p._grad_stype != "default"]
    if sparse_gradients:
        store.expect_row_sparse_gradients(sparse_gradients)
    data = [p.list_data() for p in params]
    store.broadcast_weights(keys, [d[0] for d in data], out=data)


def _trainer_init(original, self, *args, **kwargs):
    original(self, *args, **kwargs)
    store = _trainer_store(self)
    if store is not None:
        ready = [p for p in self._params if p._data is not None]
        if ready:
            _broadcast_parameters(store, self, ready)


def _parameter_init_impl(original, self, *args, **kwargs):
    original(self, *args, **kwargs)
    trainer = getattr(self, "_trainer", None)
    store = _trainer_store(trainer) if trainer is not None else None
    if store is not None:
        _broadcast_parameters(store, trainer, [self])


def _allreduce_grads(original, self):
    if not isinstance(self._kvstore, Hybrid):
        return original(self)
    # Last layers first: backward writes their gradients first, so with MXKV_OVERLAP=1
    # their buckets can start while the first layers are still being differentiated.
    params = [(i, p) for i, p in enumerate(self._params) if p.grad_req != "null"][::-1]
    sparse_weights = [(i, p) for i, p in params if p._stype != "default"]
    _refuse_dense_gradients_of_sparse_weights([p for _, p in sparse_weights])
    if sparse_weights:  # updated on the store; the script pulls the rows it needs
        self._kvstore.push_gradients(
            [i for i, _ in sparse_weights], [p.list_grad() for _, p in sparse_weights]
        )
        params = [(i, p) for i, p in params if p._stype == "default"]
    keys = [i for i, _ in params]
    grads = [p.list_grad() for _, p in params]
    if self._update_on_kvstore:
        self._kvstore.pushpull_gradients(keys, grads, out=[p.list_data() for _, p in params])
    else:
        _refuse_local_updates_in_async(self._kvstore)
        self._kvstore.pushpull_gradients(keys, grads)
    return None


def _refuse_dense_gradients_of_sparse_weights(params) -> None:
    """A row_sparse weight with a dense gradient: MXNet's Trainer fails on it under every
    store (its _allreduce_grads asks Parameter.list_data, which raises for row_sparse
    weights), and so does this one, at the same point and with the same error type."""
    dense = [p.name for p in params if p._grad_stype == "default"]
    if dense:
        raise RuntimeError(
            f"Cannot push the dense gradients of row_sparse weights {dense}: MXNet's "
            "Trainer supports row_sparse weights with row_sparse gradients only (under "
            "dist_sync its Parameter.list_data raises here); give them grad_stype="
            "'row_sparse', or make the weights dense"
        )


def _trained_weights(trainer):
    """(keys, per-device weights) of the parameters a Trainer updates."""
    params = [(i, p) for i, p in enumerate(trainer._params) if p.grad_req != "null"]
    return [i for i, _ in params], [p.list_data() for _, p in params]


def _trainer_update(original, self, *args, **kwargs):
    """After the optimizer step: the store's averaging hook (modes easgd, lasgd)."""
    result = original(self, *args, **kwargs)
    if isinstance(self._kvstore, Hybrid) and self._kvstore.averaging is not None:
        self._kvstore.after_update(*_trained_weights(self))
    return result


def _averaging_of(owner):
    """The averaging schedule behind a Trainer's or Module's hybrid store, or None."""
    store = getattr(owner, "_kvstore", None)
    return store.averaging if isinstance(store, Hybrid) else None


def _save_states(original, self, fname):
    """Trainer.save_states / Module.save_optimizer_states, then (modes easgd, lasgd) the
    averaging state to fname + '.averaging'."""
    original(self, fname)
    averaging = _averaging_of(self)
    if averaging is not None:
        write_atomically(fname + AVERAGING_SUFFIX, pickle.dumps(averaging.state()))


def _load_states(original, self, fname):
    """Trainer.load_states / Module.load_optimizer_states, then the averaging state."""
    original(self, fname)
    averaging = _averaging_of(self)
    if averaging is None:
        return
    path = fname + AVERAGING_SUFFIX
    if not os.path.exists(path):
        raise MXKVError(
            f"{path} is missing: in MXKV_MODE={self._kvstore.config.mode} the "
            "averaging state (step counter, centre or average in flight) is saved "
            f"there by save_states next to {fname}; copy it along with the states"
        )
    with open(path, "rb") as f:
        averaging.load_state(pickle.load(f))


def consensus(owner) -> None:
    """Collective: gives every rank the one model of a Trainer's or Module's averaging mode
    (easgd: the centre variable; lasgd: the average of all ranks). Call it before
    evaluating or saving the final model; nothing changes in the synchronous modes."""
    store = getattr(owner, "_kvstore", None)
    if not isinstance(store, Hybrid):
        raise MXKVError(
            "consensus: this Trainer/Module does not use the hybrid kvstore "
            "(or has not started training yet)"
        )
    if isinstance(owner, mxnet.gluon.Trainer):
        store.consensus(*_trained_weights(owner))
    else:
        group = owner._exec_group
        names, _, params = _valid_updates(group.param_arrays, group.grad_arrays, group.param_names)
        store.consensus(names, params)
        owner._params_dirty = True  # get_params() must read the devices' new weights


def steps_done(owner) -> int:
    """The optimizer steps a Trainer's (or Module's, or a Hybrid store's) group took before
    this start: 0 on a first start; in a group that `mxkv-launch --restarts` started again
    (modes async and easgd, each group its own MPI job), the steps the servers recorded
    for it, so that the script trains only the steps it had left."""
    store = (
        owner
        if isinstance(owner, Hybrid)
        else (
            _trainer_store(owner)
            if isinstance(owner, mxnet.gluon.Trainer)
            else getattr(owner, "_kvstore", None)
        )
    )
    if not isinstance(store, Hybrid):
        raise MXKVError("steps_done: this Trainer/Module does not use the hybrid kvstore")
    return store.steps_done


def _backward(original, heads, *args, **kwargs):
    """NDArray.backward and autograd.backward: rank 0's divergence guard reads the loss
    they start from (divergence_guard.py)."""
    record_heads(heads)
    return original(heads, *args, **kwargs)


def install() -> None:
    """Installs the hooks (idempotent)."""
    patch(mxnet.kvstore, "create", _create)
    for module in _MODULES_USING_CREATE:
        patch(module, "_create_kvstore", _create_kvstore)
    for module in (mxnet.model, mxnet.gluon.trainer):
        patch(module, "_create_sparse_kvstore", _create_sparse_kvstore)
    patch(mxnet.gluon.trainer.Trainer, "_init_kvstore", _init_trainer_kvstore)
    patch(mxnet.gluon.trainer.Trainer, "_reset_kvstore", _reset_trainer_kvstore)
    for module in _MODULES_USING_UPDATES:
        patch(module, "_initialize_kvstore", _initialize_kvstore)
        patch(module, "_update_params_on_kvstore", _update_params_on_kvstore)
        patch(module, "_update_params", _update_params)
    patch(mxnet.gluon.trainer.Trainer, "__init__", _trainer_init)
    patch(mxnet.gluon.trainer.Trainer, "_allreduce_grads", _allreduce_grads)
    patch(mxnet.gluon.trainer.Trainer, "_update", _trainer_update)
    patch(mxnet.gluon.trainer.Trainer, "save_states", _save_states)
    patch(mxnet.gluon.trainer.Trainer, "load_states", _load_states)
    patch(mxnet.module.module.Module, "save_optimizer_states", _save_states)
    patch(mxnet.module.module.Module, "load_optimizer_states", _load_states)
    patch(mxnet.gluon.parameter.Parameter, "_init_impl", _parameter_init_impl)
    patch(mxnet.module.base_module.BaseModule, "fit", _fit)
    patch(mxnet.ndarray.NDArray, "backward", _backward)
    patch(mxnet.autograd, "backward", _backward)
