"""How the allreduce algorithm is chosen, in one process: MXKV_ALGO and MXKV_COMPRESS refused
where they do not fit, `auto` following the algorithm table of the nearest rank count, and a
broken table refused with how to make a new one."""

import json

import mxnet as mx
import pytest

import mxkv_hybrid  # noqa: F401
from mxkv_hybrid.comm import algorithm_table
from mxkv_hybrid.config import Config
from mxkv_hybrid.errors import ConfigError


def test_compression_needs_one_of_our_algorithms():
    with pytest.raises(ConfigError, match="MXKV_COMPRESS=fp16 needs one of this package's"):
        Config.from_environment({"MXKV_ALGO": "mpi", "MXKV_COMPRESS": "fp16"})
    with pytest.raises(ConfigError, match="MXKV_ALGO='tree' is invalid: expected one of: auto, "):
        Config.from_environment({"MXKV_ALGO": "tree"})


def test_overlap_refuses_the_naive_engine():
    with pytest.raises(ConfigError, match="MXNET_ENGINE_TYPE=NaiveEngine"):
        Config.from_environment({"MXKV_OVERLAP": "1", "MXNET_ENGINE_TYPE": "NaiveEngine"})


def test_auto_follows_the_table_and_compression_never_takes_mpi(tmp_path, monkeypatch):
    path = tmp_path / "table.json"
    algorithm_table.save(str(path), 1, [(1000, "mpi"), (50000, "rd"), (-1, "ring")])
    monkeypatch.setenv("MXKV_ALGO_TABLE", str(path))
    kv = mx.kv.create("hybrid")
    chosen = [kv._collectives.algorithm_for("float32", n) for n in (10, 1000, 1001, 10**6)]
    assert chosen == ["mpi", "mpi", "rd", "ring"]
    monkeypatch.setenv("MXKV_COMPRESS", "bf16")
    kv = mx.kv.create("hybrid")
    assert kv._collectives.algorithm_for("float32", 10) == "rd"
    assert kv._collectives.algorithm_for("float64", 10) == "mpi"  # not compressed: as the table


def test_the_table_of_the_nearest_rank_count_is_used(tmp_path):
    path = str(tmp_path / "table.json")
    for ranks, algorithm in ((2, "rd"), (4, "rhd"), (8, "ring")):
        algorithm_table.save(path, ranks, [(-1, algorithm)])
    tables = algorithm_table.load(path)
    assert [algorithm_table.rules_for(tables, n)[0][1] for n in (1, 3, 5, 6, 7, 16)] == [
        "rd",
        "rd",
        "rhd",
        "rhd",
        "ring",
        "ring",
    ]


def test_a_broken_table_says_how_to_make_a_new_one(tmp_path):
    path = tmp_path / "table.json"
    path.write_text(json.dumps({"tables": {"2": [[100, "tree"]]}}))
    with pytest.raises(ConfigError, match="invalid for 2 ranks"):
        algorithm_table.load(str(path))
    path.write_text("{")
    with pytest.raises(ConfigError, match=r"python -m mxkv_hybrid\.tune"):
        algorithm_table.load(str(path))
