"""Which GPUs a rank drives, from the `--gpus` list every rank of a host is given.

- one rank on the host: the whole list (one process drives several GPUs);
- one id per rank (as many ids as ranks on the host): the id at the rank's local rank;
- the same number k of ids per rank (k x ranks ids): the local rank's k consecutive ids;
- one id with several ranks on the host: each rank its own GPU, counted from that id
  (`--gpus 0`: local rank r drives GPU r).
Any other count is ambiguous and refused."""

from typing import List, Sequence, Union

from ..comm.topology import world
from ..errors import ConfigError


def parse_gpus(gpus: Union[str, Sequence[int]]) -> List[int]:
    """'0,1' / '0, 1' / [0, 1] -> [0, 1]; '' -> [] (no GPU)."""
    if isinstance(gpus, str):
        try:
            return [int(part) for part in gpus.split(",") if part.strip()]
        except ValueError:
            raise ConfigError(
                f"--gpus {gpus!r}: expected GPU ids separated by commas, e.g. --gpus 0,1"
            ) from None
    return [int(g) for g in gpus]


def gpus_of_local_rank(gpus: Sequence[int], local_rank: int, local_size: int) -> List[int]:
    """The ids local rank `local_rank` of `local_size` drives (see the module's rules)."""
    gpus = list(gpus)
    if local_size <= 1 or not gpus:
        return gpus
    if len(gpus) == 1:
        return [gpus[0] + local_rank]
    if len(gpus) % local_size:
        listed = ",".join(map(str, gpus))
        raise ConfigError(
            f"--gpus {listed} lists {len(gpus)} GPUs for the {local_size} ranks on this host: "
            "give one id (each rank takes its own GPU from it: --gpus 0), one id per rank, or "
            f"the same number per rank (a multiple of {local_size})"
        )
    per_rank = len(gpus) // local_size
    return gpus[local_rank * per_rank : (local_rank + 1) * per_rank]


def rank_gpus(gpus: Union[str, Sequence[int]]) -> List[int]:
    """The GPU ids this process drives, given the `--gpus` list of every rank on its host
    (`mx.gpu(i) for i in mxkv_hybrid.rank_gpus(args.gpus)`; [] when none are listed)."""
    here = world()
    return gpus_of_local_rank(parse_gpus(gpus), here.local_rank, here.local_size)
