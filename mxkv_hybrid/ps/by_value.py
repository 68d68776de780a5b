"""The optimizer the workers send the parameter servers (modes sync and async), pickled so
that the servers can load it although they never ran the user's script: with cloudpickle,
which sends a class of the script (`__main__`) by value, and, registered by value too,
every module loaded from the script's own folder (a `schedulers.py` beside `train.py`).
Classes of installed packages and of MXNet (gluoncv's LRSequential, mx.optimizer.SGD) go by
reference: the server imports them, after MXNet whole (ps/server.py).

The text sent is base64: MXNet passes the command to the servers as a C string."""

import base64
import os
import pickle
import sys
from types import ModuleType
from typing import List, Optional

import cloudpickle

from ..errors import OptimizerNotSendable

PACKAGE = __name__.split(".")[0]  # this package: the servers import it themselves


def _script_folder() -> Optional[str]:
    """The folder of the script this process runs, if it runs one."""
    path = getattr(sys.modules.get("__main__"), "__file__", None)
    return os.path.dirname(os.path.abspath(path)) if path else None


def _modules_beside_the_script() -> List[ModuleType]:
    """The modules loaded from the script's folder (or below it), but this package's."""
    folder = _script_folder()
    if folder is None:
        return []
    beside = []
    for name, module in list(sys.modules.items()):
        path = getattr(module, "__file__", None)
        if name == "__main__" or not path or name.split(".")[0] == PACKAGE:
            continue
        if os.path.abspath(path).startswith(folder + os.sep) and "site-packages" not in path:
            beside.append(module)
    return beside


def dumps_for_servers(optimizer: object) -> str:
    """`optimizer` as text the servers load (loads_on_server); OptimizerNotSendable names
    what cannot be pickled."""
    modules = _modules_beside_the_script()
    for module in modules:
        cloudpickle.register_pickle_by_value(module)
    try:
        data = cloudpickle.dumps(optimizer)
    except Exception as err:  # (pickling raises TypeError, PicklingError, AttributeError, ...)
        scheduler = getattr(optimizer, "lr_scheduler", None)
        held = f" with its learning-rate scheduler {type(scheduler).__name__}" if scheduler else ""
        raise OptimizerNotSendable(
            f"the optimizer {type(optimizer).__name__}{held} cannot be sent to the parameter "
            f"servers, where it runs in this mode: {type(err).__name__}: {err}. Everything "
            "it holds must pickle: keep locks, open files and connections out of it (or "
            "make them in __setstate__), or, in mode sync, run the optimizer on the "
            "workers with gluon.Trainer(..., update_on_kvstore=False)"
        ) from err
    finally:
        for module in modules:
            cloudpickle.unregister_pickle_by_value(module)
    return base64.b64encode(data).decode("ascii")


def loads_on_server(text: str) -> object:
    """The optimizer that dumps_for_servers sent."""
    return pickle.loads(base64.b64decode(text))
