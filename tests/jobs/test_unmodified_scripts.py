"""Scripts that know nothing of mxkv_hybrid, on the generated tiny ImageNet with 2 ranks:
a Module-API script in the shape of MXNet's example/image-classification with
`--kv-store hybrid` (RecordIO and `--benchmark 1`), and a gluoncv-style script with no
kvstore flag under `mxkv-launch --auto` (RecordIO and folder). Each ends with identical
trained weights on both ranks and (real data) validation accuracy far above chance."""

import re
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import pytest

from support.checks import assert_checkpoints_identical
from support.jobs import Job, launch
from support.tiny_imagenet import TINY_IMAGENET_CLASSES

CLASSES = TINY_IMAGENET_CLASSES  # chance: 0.1
RANKS = 2
EPOCHS = 3
TRAIN_IMAGES = CLASSES * 64
# The last epoch's validation accuracy of a model that learned the classes: seen 0.927-0.969
# (96 or 160 validation images, whose estimate has a std of at most 0.05 at any accuracy);
# 0.6 is more than 10 std from chance (0.1) and from the lowest seen. That the ranks
# trained one model through the store is the weights' identity (and its control below).
LEARNED = 0.6


def run_module_script(job_dir: Path, *options: str) -> Job:
    job = launch(
        RANKS,
        "image_classification_module.py",
        "--kv-store",
        "hybrid",
        "--model-prefix",
        str(job_dir / "model"),
        "--num-epochs",
        str(EPOCHS),
        *options,
    )
    assert job.returncode == 0, job.output
    return job


def test_module_script_with_kv_store_hybrid(tiny_imagenet, job_dir):
    job = run_module_script(
        job_dir,
        "--data-train",
        str(tiny_imagenet / "train.rec"),
        "--data-val",
        str(tiny_imagenet / "val.rec"),
    )
    for rank in range(RANKS):
        lines = job.lines_of(rank)
        assert any("samples/sec" in line for line in lines), job.output
        last = re.compile(rf"Epoch\[{EPOCHS - 1}\] Validation-accuracy=([0-9.]+)")
        accuracy = [float(m.group(1)) for line in lines if (m := last.search(line))]
        assert accuracy and accuracy[0] > LEARNED, job.output
    assert_checkpoints_identical(job_dir / "model", EPOCHS)


def test_module_script_benchmark_mode(job_dir):
    job = run_module_script(job_dir, "--benchmark", "1")
    for rank in range(RANKS):
        assert any("samples/sec" in line for line in job.lines_of(rank)), job.output
    assert_checkpoints_identical(job_dir / "model", EPOCHS)


def epochs_of(lines: List[str]) -> List[Tuple[int, float, str]]:
    """(batches, validation accuracy, weights digest) per epoch of gluoncv_classic.py."""
    found = [
        re.search(r"\[Epoch \d+\] batches=(\d+) validation-accuracy=([0-9.]+) weights=(\w+)", line)
        for line in lines
    ]
    return [(int(m.group(1)), float(m.group(2)), m.group(3)) for m in found if m]


def run_classic_script(
    tiny_imagenet: Path,
    data_format: str,
    *launcher_options: str,
    epochs: int = EPOCHS,
    script_options: Sequence[str] = (),
    env: Optional[Dict[str, str]] = None,
) -> Job:
    job = launch(
        RANKS,
        "gluoncv_classic.py",
        "--data-dir",
        str(tiny_imagenet),
        "--num-epochs",
        str(epochs),
        *(["--use-rec"] if data_format == "rec" else []),
        *script_options,
        env=env,
        launcher_options=launcher_options,
    )
    assert job.returncode == 0, job.output
    return job


@pytest.mark.parametrize("data_format", ["rec", "folder"])
def test_no_flag_script_under_auto(tiny_imagenet, data_format):
    job = run_classic_script(tiny_imagenet, data_format, "--auto")
    per_rank = [epochs_of(job.lines_of(rank)) for rank in range(RANKS)]
    assert len(per_rank[0]) == EPOCHS, job.output
    for rank in range(RANKS):
        batches_per_epoch = [batches for batches, _, _ in per_rank[rank]]
        assert batches_per_epoch == [TRAIN_IMAGES // RANKS // 32] * EPOCHS
        assert [digest for _, _, digest in per_rank[rank]] == [d for _, _, d in per_rank[0]]
        assert per_rank[rank][-1][1] > LEARNED, job.output
    said = "\n".join(job.lines_of(0))
    assert "mxkv_hybrid --auto: kvstore 'device' -> 'hybrid' (2 ranks)" in said
    reader = "ImageRecordIter(shuffle=True" if data_format == "rec" else "DataLoader(shuffle=True)"
    assert f"mxkv_hybrid --auto: {reader}" in said, job.output
    assert "--auto" not in "\n".join(job.lines_of(1)), "only rank 0 logs the changes"


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_gluoncv_optimizer_and_its_saved_states_with_the_optimizer_on_the_servers(
    tiny_imagenet, tmp_path, mode
):
    """gluoncv's optimizer (a scheduler and no learning_rate: lr is None) and its
    trainer.save_states whenever validation improves, on every rank, under --auto in the
    modes whose optimizer runs on the servers (2 groups): it trains, and the servers write
    the states (before, the leaders crashed on lr None, then save_states raised)."""
    job = run_classic_script(
        tiny_imagenet,
        "rec",
        *("--auto", "--group-size", "1", "--servers", "1"),
        script_options=["--lr-mode", "cosine", "--save-dir", str(tmp_path)],
        env={"MXKV_MODE": mode},
    )
    per_rank = [epochs_of(job.lines_of(rank)) for rank in range(RANKS)]
    assert all(epochs[-1][1] > LEARNED for epochs in per_rank), job.output
    if mode == "sync":  # one model: the same weights on every rank after every epoch
        assert [d for *_, d in per_rank[1]] == [d for *_, d in per_rank[0]]
    assert list(tmp_path.glob("*-best.states.server0")), sorted(tmp_path.iterdir())


def test_without_auto_each_rank_trains_alone(tiny_imagenet):
    """The control: the same script without --auto reads all data and trains alone."""
    job = run_classic_script(tiny_imagenet, "folder", epochs=1)
    rank0, rank1 = (epochs_of(job.lines_of(rank)) for rank in range(RANKS))
    assert [batches for batches, _, _ in rank0] == [TRAIN_IMAGES // 32]
    assert rank0[-1][2] != rank1[-1][2]


FALLBACK = re.compile(
    r"mxkv_hybrid: this script names kvstore '(\w+)' in a job of (\d+) ranks "
    r"started by mxkv-launch, and MXNet's '\w+' store does not reach the other "
    r"processes: every rank trains alone\. Name kvstore='hybrid'"
)


@pytest.mark.parametrize(
    "how, name",
    [("create", "local"), ("create", "hybird"), ("trainer", "device"), ("module", "local")],
)
def test_a_store_that_does_not_reach_the_other_ranks_is_named_once_by_rank_0(how, name):
    """MXNet takes any name but 'dist*' for a store of this process alone (a typo too), and
    with one device Trainer and Module.fit create no store at all: each rank would train
    alone without a word."""
    job = launch(RANKS, "store_name.py", how, name)
    assert job.returncode == 0, job.output
    said = [FALLBACK.search(line) for line in job.output.splitlines()]
    said = [found for found in said if found]
    assert [(found.group(1), found.group(2)) for found in said] == [(name, str(RANKS))], job.output
    assert all(FALLBACK.search(line) is None for line in job.lines_of(1)), job.output


@pytest.mark.parametrize(
    "ranks, how, name, launcher_options",
    [
        (RANKS, "trainer", "hybrid", ()),
        (RANKS, "trainer", "device", ("--auto",)),
        (RANKS, "module", "local", ("--auto",)),
        (1, "trainer", "local", ()),
    ],
)
def test_no_word_where_the_store_reaches_every_rank(ranks, how, name, launcher_options):
    """The control: 'hybrid', --auto (which makes 'local' and 'device' 'hybrid', also where
    Module.fit hands MXNet the name before --auto renames it), or one rank alone."""
    job = launch(ranks, "store_name.py", how, name, launcher_options=launcher_options)
    assert job.returncode == 0, job.output
    assert "stepped" in job.output and not FALLBACK.search(job.output), job.output
