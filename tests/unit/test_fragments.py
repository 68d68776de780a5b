"""modes/fragments.py: the model's elements cut into equal fragments, reached by views."""

import mxnet as mx
import numpy as np
import pytest

from mxkv_hybrid.errors import ConfigError
from mxkv_hybrid.modes.fragments import Piece, cut_into_fragments


def test_fragments_hold_equal_element_counts_across_keys():
    fragments = cut_into_fragments(["a", "b", "c"], [10, 3, 7], 4)  # 20 elements, 5 each
    assert fragments == [
        [Piece("a", 0, 5, 10)],
        [Piece("a", 5, 10, 10)],
        [Piece("b", 0, 3, 3), Piece("c", 0, 2, 7)],
        [Piece("c", 2, 7, 7)],
    ]
    assert [p.name for p in fragments[2]] == ["b", "c[0:2]"]  # a whole key keeps its name


def test_one_fragment_is_every_key_whole():
    assert cut_into_fragments([3, 1], [4, 6], 1) == [[Piece(3, 0, 4, 4), Piece(1, 0, 6, 6)]]


def test_a_ragged_cut_differs_by_one_element_at_most():
    fragments = cut_into_fragments(["w"], [10], 3)
    assert [p.stop - p.start for (p,) in fragments] == [3, 3, 4]


def test_a_piece_s_view_writes_into_the_weight():
    weight = mx.nd.arange(12).reshape((3, 4))
    view = Piece("w", 5, 9, 12).view(weight)
    view += 100
    np.testing.assert_array_equal(
        weight.asnumpy().ravel(), [0, 1, 2, 3, 4, 105, 106, 107, 108, 9, 10, 11]
    )
    assert Piece("w", 0, 12, 12).view(weight) is weight


def test_more_fragments_than_elements_are_refused():
    with pytest.raises(ConfigError, match="MXKV_FRAGMENTS=5 is more than the model's 4 elements"):
        cut_into_fragments(["w"], [4], 5)
