"""MXKV_HIERARCHY: whether mode allreduce runs hierarchically (the C++ stages are in
csrc/allreduce_hierarchical.h)."""

from collections import Counter
from typing import List

from ..errors import ConfigError


def use_hierarchy(setting: str, group_of_rank: List[int]) -> bool:
    """on / off as set; auto: on when there is more than one group and all have the same
    size. Refuses `on` for groups of unequal size (the slices would not line up)."""
    sizes = Counter(group_of_rank)
    equal = len(set(sizes.values())) == 1
    if setting == "on" and not equal:
        raise ConfigError(
            f"MXKV_HIERARCHY=on needs groups of equal size, but the {len(group_of_rank)} ranks "
            f"form groups of {', '.join(str(sizes[g]) for g in sorted(sizes))} ranks: set "
            "MXKV_GROUP_SIZE to a divisor of the rank count, or MXKV_HIERARCHY=auto (flat "
            "allreduce for unequal groups)"
        )
    return setting == "on" or (setting == "auto" and len(sizes) > 1 and equal)
