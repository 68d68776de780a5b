"""examples/train_imagenet.py on the generated tiny ImageNet, 2 ranks: it learns (top-1
far above chance) from RecordIO and from an image folder, ends with identical weights,
and a run resumed from a checkpoint continues where the first one was."""

import os
import re
import subprocess
from pathlib import Path

from support import jobs
from support.jobs import JOB_TIMEOUT
from support.paths import EXAMPLES
from support.tiny_imagenet import TINY_IMAGENET_CLASSES

CLASSES = TINY_IMAGENET_CLASSES


def train(tiny_imagenet: Path, *options: str) -> str:
    """Runs the script on 2 ranks; returns rank 0's lines."""
    done = subprocess.run(
        [
            jobs.INTERPRETER,
            "-m",
            "mxkv_hybrid.launch",
            "-n",
            "2",
            "--timeout",
            str(JOB_TIMEOUT),
            "--",
            "python",
            str(EXAMPLES / "train_imagenet.py"),
            "--data-dir",
            str(tiny_imagenet),
            "--image-size",
            "32",
            "--warmup-epochs",
            "1",
            "--log-interval",
            "5",
            *options,
        ],
        capture_output=True,
        check=False,
        text=True,
        timeout=JOB_TIMEOUT + 30,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return "\n".join(line[4:] for line in done.stdout.splitlines() if line.startswith("[0] "))


def final_result(output: str):
    final = re.search(
        r"final validation top-1 ([0-9.]+) top-5 ([0-9.]+) on (\d+) images; "
        r"weights identical on all ranks: (\w+)",
        output,
    )
    assert final, output
    assert int(final.group(3)) == CLASSES * 16, output  # every validation image, once
    return float(final.group(1)), final.group(4)


def test_learns_from_records_with_identical_weights(tiny_imagenet):
    output = train(tiny_imagenet, "--data-format", "rec", "--num-epochs", "4")
    assert f"{CLASSES} classes, rec data, 2 rank(s)" in output
    assert "10 steps/epoch of 64 images" in output  # 640 images / (2 ranks x 32)
    top1, identical = final_result(output)
    assert top1 > 2.5 / CLASSES and identical == "True", output


def test_learns_from_folders_and_a_resumed_run_continues_from_its_checkpoint(
    tiny_imagenet, tmp_path
):
    """4 epochs from an image folder, a checkpoint each; then epoch 4 again, resumed from
    the checkpoint of epoch 3: the same validation numbers and learning rates."""
    saved = tmp_path / "checkpoints"
    first = train(
        tiny_imagenet, "--num-epochs", "4", "--save-dir", str(saved), "--data-format", "folder"
    )
    assert f"{CLASSES} classes, folder data, 2 rank(s)" in first
    assert "10 steps/epoch of 64 images" in first
    top1, identical = final_result(first)
    assert top1 > 2.5 / CLASSES and identical == "True", first
    assert sorted(p.name for p in saved.iterdir()) == [f"epoch000{e}" for e in range(1, 5)]
    resumed = train(
        tiny_imagenet,
        "--num-epochs",
        "4",
        "--save-dir",
        str(saved),
        "--resume-epoch",
        "3",
        "--data-format",
        "folder",
    )
    # the weights of epoch 3 came back: the same validation numbers
    at_epoch_3 = re.search(r"epoch 3 done in [0-9.]+ s: (validation top-1 \S+ top-5 \S+)", first)
    assert f"resumed from epoch 3: {at_epoch_3.group(1)}" in resumed, (first, resumed)
    # the optimizer's update count came back: epoch 4 has the same learning rates
    rates = [re.findall(r"epoch 4 step \d+/\d+ .* lr ([0-9.]+)", run) for run in (first, resumed)]
    assert rates[0] and rates[0] == rates[1], rates
    assert "epoch 3 " not in resumed.split("resumed from")[1]


def test_a_restarted_job_goes_on_from_its_latest_checkpoint(tiny_imagenet, tmp_path):
    """mxkv-launch --restarts 1 with --auto-resume: rank 1 is killed at its 25th pushpull,
    in epoch 3 (10 steps and the validation's pushpulls an epoch); the job starts again from
    the checkpoint of epoch 2, runs epoch 3 once more, and finishes."""
    done = subprocess.run(
        [
            jobs.INTERPRETER,
            "-m",
            "mxkv_hybrid.launch",
            "-n",
            "2",
            "--timeout",
            str(JOB_TIMEOUT),
            "--restarts",
            "1",
            "--",
            "python",
            str(EXAMPLES / "train_imagenet.py"),
            "--data-dir",
            str(tiny_imagenet),
            "--image-size",
            "32",
            "--warmup-epochs",
            "1",
            "--log-interval",
            "5",
            "--num-epochs",
            "3",
            "--data-format",
            "folder",
            "--save-dir",
            str(tmp_path),
            "--auto-resume",
        ],
        capture_output=True,
        check=False,
        text=True,
        timeout=JOB_TIMEOUT + 30,
        env=dict(os.environ, MXKV_FAULT="kill:rank=1:step=25"),
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "starting the job again (restart 1 of 1" in done.stderr, done.stderr
    rank0 = [line[4:] for line in done.stdout.splitlines() if line.startswith("[0] ")]
    assert "resumed from the latest checkpoint, after epoch 2" in rank0, done.stdout
    assert sum(line.startswith("epoch 3 done") for line in rank0) == 1, done.stdout
    final_result("\n".join(rank0))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["latest"]
