"""MXKV_HIERARCHY, in one process: when the hierarchical allreduce is chosen (`auto`:
several groups of equal size), `on` refusing groups of unequal size, and the knob's values."""

import pytest

from mxkv_hybrid.comm.hierarchy import use_hierarchy
from mxkv_hybrid.config import Config
from mxkv_hybrid.errors import ConfigError


def test_auto_is_hierarchical_for_several_groups_of_equal_size():
    assert use_hierarchy("auto", [0, 0, 1, 1])
    assert use_hierarchy("auto", [0, 0, 0, 1, 1, 1])
    assert not use_hierarchy("auto", [0, 0, 0, 0])  # one group (one host)
    assert not use_hierarchy("auto", [0, 0, 1, 1, 2])  # unequal: flat
    assert not use_hierarchy("off", [0, 0, 1, 1])
    assert use_hierarchy("on", [0, 0, 0])


def test_on_refuses_groups_of_unequal_size():
    with pytest.raises(
        ConfigError,
        match="MXKV_HIERARCHY=on needs groups of equal size, but "
        "the 5 ranks form groups of 2, 2, 1 ranks",
    ):
        use_hierarchy("on", [0, 0, 1, 1, 2])


def test_the_knob():
    assert Config.from_environment({}).hierarchy == "auto"
    with pytest.raises(ConfigError, match="MXKV_HIERARCHY='yes' is invalid: expected one of: auto"):
        Config.from_environment({"MXKV_HIERARCHY": "yes"})
