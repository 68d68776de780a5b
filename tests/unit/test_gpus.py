"""Which GPUs a local rank drives (integration/gpus.py), in one process: its share of a
--gpus list, and lists refused as ambiguous or malformed. No GPU is needed: the choice is ids."""

import pytest

from mxkv_hybrid.errors import ConfigError
from mxkv_hybrid.integration.gpus import gpus_of_local_rank, parse_gpus


@pytest.mark.parametrize(
    "gpus, local_size, expected",
    [
        ([0, 1, 2, 3], 1, [[0, 1, 2, 3]]),  # a rank alone drives the whole list
        ([0, 1, 2, 3], 4, [[0], [1], [2], [3]]),  # one id per rank: the local rank's
        ([4, 5, 6, 7], 4, [[4], [5], [6], [7]]),
        ([0, 1, 2, 3], 2, [[0, 1], [2, 3]]),  # two per rank
        ([0], 4, [[0], [1], [2], [3]]),  # one id: each rank its own from it
        ([2], 2, [[2], [3]]),
        ([], 4, [[], [], [], []]),  # no GPU: CPU
    ],
)
def test_each_local_rank_gets_its_share(gpus, local_size, expected):
    assert [gpus_of_local_rank(gpus, r, local_size) for r in range(local_size)] == expected


def test_an_ambiguous_list_is_refused_with_the_rules():
    with pytest.raises(
        ConfigError,
        match=r"--gpus 0,1,2 lists 3 GPUs for the 2 ranks on this "
        r"host: give one id .*a multiple of 2",
    ):
        gpus_of_local_rank([0, 1, 2], 0, 2)
    with pytest.raises(ConfigError, match="expected GPU ids separated by commas"):
        parse_gpus("0;1")
    assert parse_gpus(" 0, 1 ") == [0, 1] and parse_gpus("") == []
