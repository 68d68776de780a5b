"""No silent fallback: in a job of more than one rank started by mxkv-launch, a script that
names a store other than 'hybrid' (MXNet's 'local' or 'device', which never reach the other
processes, or a typo, which MXNet takes for 'local') trains every rank alone. Rank 0 says
so, once, at the first store the script names, with the fix. ('dist_*' stores reach the
other processes through ps-lite, or fail loudly without it; under --auto 'local' and
'device' become 'hybrid'.)"""

import logging
from typing import Any

from ..config import read_knob
from ..launch.control.keeper import rank_in_job, ranks_in_job
from ..logs import TO_STDOUT
from . import auto

log = logging.getLogger(__name__)
_said = False  # rank 0 said it (once)


def check(name: Any) -> None:
    """Called with every store name the script gives (mx.kv.create, Trainer, Module.fit),
    before --auto renames it."""
    global _said
    if (
        _said
        or not isinstance(name, str)
        or name.lower() == "hybrid"
        or name.lower().startswith("dist")
        or auto.replaces_store(name)
    ):
        return
    ranks = ranks_in_job()
    if not read_knob("MXKV_LAUNCHER_LINK") or ranks is None or ranks < 2:
        return
    _said = True
    if rank_in_job() == 0:
        log.warning(
            f"mxkv_hybrid: this script names kvstore {name!r} in a job of {ranks} "
            f"ranks started by mxkv-launch, and MXNet's {name!r} store does not reach "
            "the other processes: every rank trains alone. Name kvstore='hybrid' "
            "(mxkv-launch runs python scripts with mxkv_hybrid imported), or start the "
            "job with mxkv-launch --auto, which makes 'local' and 'device' 'hybrid'",
            extra=TO_STDOUT,
        )
