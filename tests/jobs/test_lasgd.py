"""MXKV_MODE=lasgd and the explicit averager, on real MPI jobs: every step follows the
formulas of tests/support/averaging_reference.py; a checkpoint resumes the same trajectory."""

import json
import os

import numpy as np
import pytest

from mxkv_hybrid.modes.rounded_deltas import round_to_16_bits

from support import averaging_reference as reference
from support.checks import load_ranks
from support.warm_ranks import WarmRanks, launch_in
from workers.quantisers import quantise_1bit

RANKS, TAU, WARMUP, STEPS = 3, 2, 2, 9


def run_steps(warm_ranks: WarmRanks, job_dir, *args: str, **env: str):
    """averaging_steps.py on 3 warm ranks in mode lasgd; (STEP records, CONSENSUS or None)."""
    job = warm_ranks.launch(
        RANKS,
        "averaging_steps.py",
        str(job_dir),
        *args,
        timeout=120,
        env=dict(
            {"MXKV_MODE": "lasgd", "MXKV_TAU": str(TAU), "MXKV_WARMUP_STEPS": str(WARMUP)}, **env
        ),
    )
    assert job.returncode == 0, job.output
    lines = job.lines_of(0)
    steps = [json.loads(line[5:]) for line in lines if line.startswith("STEP ")]
    consensus = [json.loads(line[10:]) for line in lines if line.startswith("CONSENSUS ")]
    return steps, (consensus[0] if consensus else None)


def resume_after_step_5(warm_ranks: WarmRanks, tmp_path, steps: int, **env: str) -> list:
    """averaging_steps.py saved after step 5 (tmp_path/first), then resumed from that
    checkpoint (tmp_path/second): the resumed run's STEP records, steps 6 to `steps`."""
    per_rank = str(tmp_path / "ckpt-{rank}")
    run_steps(warm_ranks, tmp_path / "first", str(steps), "nag", "--save", "5", per_rank, **env)
    resumed, _ = run_steps(
        warm_ranks, tmp_path / "second", str(steps), "nag", "--resume", per_rank, **env
    )
    assert [r["step"] for r in resumed] == list(range(6, steps + 1))
    return resumed


def assert_steps_follow(records: list, expected: list) -> None:
    """Each record's weights within 1e-5 of the reference's at its step."""
    for record in records:
        np.testing.assert_allclose(
            record["weights"],
            expected[record["step"] - 1]["weights"],
            rtol=0,
            atol=1e-5,
            err_msg=f"step {record['step']}",
        )


@pytest.mark.parametrize("overlap", [True, False])
@pytest.mark.parametrize("optimizer", ["sgd", "nag"])
def test_lasgd_steps_follow_the_formula(warm_ranks, job_dir, overlap, optimizer):
    seen, agreed = run_steps(
        warm_ranks,
        job_dir,
        str(STEPS),
        optimizer,
        "--consensus",
        MXKV_LASGD_OVERLAP=str(int(overlap)),
    )
    expected = reference.lasgd(STEPS, RANKS, TAU, WARMUP, overlap, optimizer)
    assert [r["step"] for r in seen] == list(range(1, STEPS + 1))
    for record, want in zip(seen, expected):
        np.testing.assert_allclose(
            record["weights"], want["weights"], rtol=0, atol=1e-5, err_msg=f"step {record['step']}"
        )
    final = reference.consensus_of_lasgd(expected[-1], overlap)
    np.testing.assert_allclose(agreed, np.tile(final, (RANKS, 1)), rtol=0, atol=1e-5)
    assert all(row == agreed[0] for row in agreed)  # bitwise the same model everywhere


@pytest.mark.parametrize("outer", ["nesterov", "sgd"])
def test_an_outer_optimizer_follows_its_formula(warm_ranks, job_dir, outer):
    """MXKV_OUTER (DiLoCo) on blocking averages, every step against the numpy reference;
    control: the same steps without it differ (plain averaging)."""
    settings = {
        "MXKV_LASGD_OVERLAP": "0",
        "MXKV_OUTER": outer,
        "MXKV_OUTER_LR": "0.7",
        "MXKV_OUTER_MOMENTUM": "0.9",
    }
    seen, _ = run_steps(warm_ranks, job_dir, str(STEPS), "nag", **settings)
    expected = reference.lasgd_outer(STEPS, RANKS, TAU, WARMUP, "nag", outer, 0.7, 0.9)
    for record, want in zip(seen, expected):
        np.testing.assert_allclose(
            record["weights"], want["weights"], rtol=0, atol=1e-5, err_msg=f"step {record['step']}"
        )
    plain = reference.lasgd(STEPS, RANKS, TAU, WARMUP, False, "nag")
    assert np.abs(plain[-1]["weights"] - expected[-1]["weights"]).max() > 1e-2


def test_an_outer_optimizer_s_state_survives_a_checkpoint(warm_ranks, tmp_path):
    """Saved after step 5, between the outer steps of 4 and 6: the anchor and the momentum
    come back with it, and the resumed run ends where the straight one does."""
    settings = {"MXKV_LASGD_OVERLAP": "0", "MXKV_OUTER": "nesterov"}
    run_steps(warm_ranks, tmp_path / "straight", str(STEPS), "nag", **settings)
    resume_after_step_5(warm_ranks, tmp_path, STEPS, **settings)
    for rank in range(RANKS):
        straight = np.load(tmp_path / "straight" / f"rank{rank}.npz")
        second = np.load(tmp_path / "second" / f"rank{rank}.npz")
        np.testing.assert_allclose(second["w"], straight["w"], rtol=0, atol=1e-6)


STREAMING_TAU, STREAMING_STEPS = 4, 11  # 2 fragments: points at steps 4, 6, 8, 10


@pytest.mark.parametrize(
    "overlap, outer, fragments",
    [
        (False, "none", 2),
        (True, "none", 2),
        (False, "nesterov", 2),
        (True, "nesterov", 2),
        (True, "sgd", 1),
    ],
)
def test_streaming_fragments_and_outer_steps_follow_the_formula(
    warm_ranks, job_dir, overlap, outer, fragments
):
    """MXKV_FRAGMENTS (the 3 weights cut into [0:1] and [1:3]) and MXKV_OUTER (its default
    momentum: the rule 1 - lr), blocking and overlapped, every step and the consensus
    against the numpy reference; control: the reference without fragments, or without the
    outer optimizer, differs."""
    seen, agreed = run_steps(
        warm_ranks,
        job_dir,
        str(STREAMING_STEPS),
        "nag",
        "--consensus",
        MXKV_TAU=str(STREAMING_TAU),
        MXKV_LASGD_OVERLAP=str(int(overlap)),
        MXKV_FRAGMENTS=str(fragments),
        MXKV_OUTER=outer,
    )
    expected = reference.streaming_lasgd(
        STREAMING_STEPS, RANKS, STREAMING_TAU, WARMUP, overlap, "nag", fragments, outer
    )
    assert [r["step"] for r in seen] == list(range(1, STREAMING_STEPS + 1))
    for record, want in zip(seen, expected):
        np.testing.assert_allclose(
            record["weights"], want["weights"], rtol=0, atol=1e-5, err_msg=f"step {record['step']}"
        )
    np.testing.assert_allclose(
        agreed, np.tile(expected[-1]["consensus"], (RANKS, 1)), rtol=0, atol=1e-5
    )
    assert all(row == agreed[0] for row in agreed)
    other = reference.streaming_lasgd(
        STREAMING_STEPS,
        RANKS,
        STREAMING_TAU,
        WARMUP,
        overlap,
        "nag",
        3 - fragments if outer == "none" else fragments,
        "none" if outer != "none" else outer,
    )
    # the control fails the comparison above: it differs by far more than its atol (1e-5)
    assert np.abs(other[-1]["weights"] - expected[-1]["weights"]).max() > 100 * 1e-5


def test_streaming_state_survives_a_checkpoint(warm_ranks, tmp_path):
    """Overlapped, 2 fragments, Nesterov: saved after step 5, while fragment 0's average
    (started at step 4) is in flight; the resumed run ends where the straight one does."""
    settings = {"MXKV_TAU": str(STREAMING_TAU), "MXKV_FRAGMENTS": "2", "MXKV_OUTER": "nesterov"}
    run_steps(warm_ranks, tmp_path / "straight", str(STREAMING_STEPS), "nag", **settings)
    resumed = resume_after_step_5(warm_ranks, tmp_path, STREAMING_STEPS, **settings)
    expected = reference.streaming_lasgd(
        STREAMING_STEPS, RANKS, STREAMING_TAU, WARMUP, True, "nag", 2, "nesterov"
    )
    assert_steps_follow(resumed, expected)
    for rank in range(RANKS):
        straight = np.load(tmp_path / "straight" / f"rank{rank}.npz")
        second = np.load(tmp_path / "second" / f"rank{rank}.npz")
        np.testing.assert_allclose(second["w"], straight["w"], rtol=0, atol=1e-6)


def test_lasgd_correction_keeps_the_mean_over_ranks(warm_ranks, job_dir):
    """Applying x += A - S does not move the mean of x over the ranks (sum of A - S is 0)."""
    seen, _ = run_steps(warm_ranks, job_dir, str(STEPS), "sgd")
    expected = reference.lasgd(STEPS, RANKS, TAU, WARMUP, True, "sgd")
    for record, want in zip(seen, expected):
        if want["pending"] is not None:
            assert abs(want["pending"].sum(axis=0)).max() < 1e-12
        np.testing.assert_allclose(
            np.mean(record["weights"], axis=0), want["weights"].mean(axis=0), rtol=0, atol=1e-5
        )


def test_lasgd_checkpoint_resumes_the_same_trajectory(warm_ranks, tmp_path):
    """Saved after step 5, while the average started at step 4 is in flight; each rank
    into a directory of its own, as on disks local to each host (only rank 0's holds the
    manifest)."""
    run_steps(warm_ranks, tmp_path / "straight", str(STEPS), "nag")
    per_rank = str(tmp_path / "ckpt-{rank}")
    run_steps(warm_ranks, tmp_path / "first", str(STEPS), "nag", "--save", "5", per_rank)
    assert (tmp_path / "ckpt-0" / "manifest.json").exists()
    for rank in range(1, RANKS):
        assert sorted(os.listdir(tmp_path / f"ckpt-{rank}")) == [
            f"rank{rank}.g1.params",
            f"rank{rank}.g1.states",
            f"rank{rank}.g1.states.averaging",
        ]
    resumed, _ = run_steps(warm_ranks, tmp_path / "second", str(STEPS), "nag", "--resume", per_rank)
    assert [r["step"] for r in resumed] == list(range(6, STEPS + 1))
    for rank in range(RANKS):
        straight = np.load(tmp_path / "straight" / f"rank{rank}.npz")
        second = np.load(tmp_path / "second" / f"rank{rank}.npz")
        np.testing.assert_allclose(second["w"], straight["w"], rtol=0, atol=1e-6)
        assert int(second["rounds"]) == int(straight["rounds"]) == 3  # steps 4, 6, 8


@pytest.mark.parametrize("overlap", ["1", "0"])
def test_periodic_model_averager_follows_the_formula(warm_ranks, overlap):
    """The explicit object with a local Trainer: broadcast_parameters, then local steps
    averaged every PERIOD steps (no warm-up), as mode lasgd does."""
    period = 3
    job = warm_ranks.launch(RANKS, "explicit_averager.py", str(STEPS), str(period), overlap)
    assert job.returncode == 0, job.output
    lines = job.lines_of(0)
    seen = [json.loads(line[5:]) for line in lines if line.startswith("STEP ")]
    agreed = json.loads(next(line[10:] for line in lines if line.startswith("CONSENSUS ")))
    expected = reference.lasgd(STEPS, RANKS, period, 0, overlap == "1", "sgd")
    for record, want in zip(seen, expected):
        np.testing.assert_allclose(
            record["weights"], want["weights"], rtol=0, atol=1e-5, err_msg=f"step {record['step']}"
        )
    final = reference.consensus_of_lasgd(expected[-1], overlap == "1")
    np.testing.assert_allclose(agreed, np.tile(final, (RANKS, 1)), rtol=0, atol=1e-5)
    assert f"averagings {STEPS // period}" in lines


def test_module_fit_in_lasgd_mode_averages_saves_and_agrees(warm_ranks, job_dir):
    """Module: local updates, averagings after steps 2 and 4 of 5, the averaging state
    saved beside the optimizer states and loaded back, one model after consensus."""
    job = launch_in(
        warm_ranks,
        2,
        "train_module.py",
        "--out",
        str(job_dir),
        "--averaging-checks",
        env={"MXKV_MODE": "lasgd", "MXKV_TAU": "2"},
        timeout=120,
    )
    assert job.returncode == 0, job.output
    for rank in range(2):
        text = " ".join(job.lines_of(rank))
        assert "update_on_kvstore=False" in text and "averaging_rounds=2" in text, job.output
        assert "averaging steps after load=5" in text, job.output
        assert (job_dir / f"rank{rank}.states.averaging").exists()
    weights = load_ranks(job_dir, 2)
    for name in weights[0]:
        assert np.array_equal(weights[0][name], weights[1][name]), name


def test_the_average_in_flight_does_not_hold_up_the_local_steps(warm_ranks):
    """Behind a link of 1 s latency, the average started at step 2 is still travelling
    when step 3 (its gradients reduced, its update done) is over: the local step did not
    wait for it. It lands by close (so the check can fail)."""
    job = launch_in(
        warm_ranks,
        2,
        "lasgd_overlap.py",
        timeout=120,
        env={
            "MXKV_MODE": "lasgd",
            "MXKV_TAU": "2",
            "MXKV_GROUP_SIZE": "1",
            "MXKV_THROTTLE_MBPS": "1000",
            "MXKV_THROTTLE_LATENCY_MS": "1000",
        },
    )
    assert job.returncode == 0, job.output
    for rank in range(2):
        seen = json.loads(job.lines_of(rank)[-1])
        assert seen["in_flight_after_step_3"] >= 1, seen
        assert seen["in_flight_after_close"] == 0, seen


HALF_UNIT = {"bf16": 2.0**-8, "fp16": 2.0**-11}  # the largest relative rounding error


@pytest.mark.parametrize("compress, overlap", [("bf16", False), ("bf16", True), ("fp16", False)])
def test_16_bit_averages_send_rounded_changes_with_error_feedback(
    warm_ranks, job_dir, compress, overlap
):
    """MXKV_COMPRESS in lasgd, the weights near 1000 (start and targets moved by 1000), no
    warm-up: every step is within a derived bound of the reference that rounds each
    rank's change since the anchor (plus its residual). Per point the wire adds at most
    4 half-units of the largest change D (each rank's own rounding, the ring's partial
    sums of up to 3 D, a residual counted twice, over 3 ranks); twice that for what the
    local steps carry on (momentum 0.5); and float32's own arithmetic at 1000 (2^-24 x 1024
    an operation, a few a step: 1e-3 over the 9 steps). Control: rounding the weights
    themselves, as 16-bit averages did before (bf16 steps of 4 there), misses the bound."""
    offset, unit = 1000.0, HALF_UNIT[compress]
    seen, agreed = run_steps(
        warm_ranks,
        job_dir,
        str(STEPS),
        "nag",
        "--offset",
        str(offset),
        "--consensus",
        MXKV_COMPRESS=compress,
        MXKV_LASGD_OVERLAP=str(int(overlap)),
        MXKV_WARMUP_STEPS="0",
        MXKV_ALGO="ring",
    )
    rounding = lambda values: round_to_16_bits(values, compress)  # noqa: E731
    expected = reference.streaming_lasgd(
        STEPS, RANKS, TAU, 0, overlap, "nag", 1, round16=rounding, offset=offset
    )
    bound = 1e-3
    for record, want in zip(seen, expected):
        bound += 8 * unit * want["change"]
        np.testing.assert_allclose(
            record["weights"], want["weights"], rtol=0, atol=bound, err_msg=f"step {record['step']}"
        )
    assert all(row == agreed[0] for row in agreed)
    # consensus averages the changes too: one more point's error, of changes at most D
    consensus_bound = bound + 8 * unit * max(want["change"] for want in expected)
    np.testing.assert_allclose(
        agreed, np.tile(expected[-1]["consensus"], (RANKS, 1)), rtol=0, atol=consensus_bound
    )
    exact = reference.streaming_lasgd(STEPS, RANKS, TAU, 0, overlap, "nag", 1, offset=offset)
    means = [record["weights"].mean(axis=0) for record in exact]
    assert max(np.abs(rounding(mean) - mean).max() for mean in means) > bound


def one_bit_codes(changes: np.ndarray) -> np.ndarray:
    """What each rank's codes of its row of changes decode to (numpy's 1-bit quantiser)."""
    return np.stack([quantise_1bit(row.astype(np.float32))[0] for row in changes])


@pytest.mark.parametrize("overlap", [False, True])
def test_1_bit_averages_send_codes_of_the_changes_with_error_feedback(warm_ranks, job_dir, overlap):
    """MXKV_COMPRESS=1bit: every step equals the reference that sends each rank's change
    since the anchor, plus its residual, as 1-bit codes (tests/workers/quantisers.py) and
    averages what they decode to. Both sides compute the same codes, so the bound is
    float32's arithmetic against float64's (1e-5, as the other lasgd steps). Consensus
    averages the same way. Control: the float32 averages, and the codes without their
    residual, each miss the bound by far."""
    seen, agreed = run_steps(
        warm_ranks,
        job_dir,
        str(STEPS),
        "nag",
        "--consensus",
        MXKV_COMPRESS="1bit",
        MXKV_LASGD_OVERLAP=str(int(overlap)),
    )
    expected = reference.streaming_lasgd(
        STEPS, RANKS, TAU, WARMUP, overlap, "nag", 1, round16=one_bit_codes
    )
    for record, want in zip(seen, expected):
        np.testing.assert_allclose(
            record["weights"], want["weights"], rtol=0, atol=1e-5, err_msg=f"step {record['step']}"
        )
    np.testing.assert_allclose(
        agreed, np.tile(expected[-1]["coded_consensus"], (RANKS, 1)), rtol=0, atol=1e-5
    )
    assert all(row == agreed[0] for row in agreed)
    exact = reference.streaming_lasgd(STEPS, RANKS, TAU, WARMUP, overlap, "nag", 1)
    forgetful = reference.streaming_lasgd(
        STEPS, RANKS, TAU, WARMUP, overlap, "nag", 1, round16=one_bit_codes, feedback=False
    )
    for control in (exact, forgetful):
        assert np.abs(control[-1]["weights"] - expected[-1]["weights"]).max() > 100 * 1e-5


def test_1_bit_residuals_survive_a_checkpoint(warm_ranks, tmp_path):
    """Saved after step 5, a point after the one of step 4: each rank's residual comes back
    with the checkpoint, and the resumed steps follow the reference (a residual lost
    would send the next codes without it)."""
    resumed = resume_after_step_5(
        warm_ranks, tmp_path, STEPS, MXKV_COMPRESS="1bit", MXKV_LASGD_OVERLAP="0"
    )
    expected = reference.streaming_lasgd(
        STEPS, RANKS, TAU, WARMUP, False, "nag", 1, round16=one_bit_codes
    )
    assert_steps_follow(resumed, expected)


# train_gluon.py: 6 steps of 2 ranks x 8 samples, weights below 1 in size: the same sums in
# another order (a process's batch split over 2 devices) move a weight by at most
# steps x summands x float32's unit roundoff.
SPLIT_WITHIN = 6 * 16 * 2.0**-24


@pytest.mark.parametrize(
    "overlap, consensus", [("0", []), ("1", ["--consensus"])], ids=["blocking", "consensus"]
)
def test_several_devices_per_rank_average_as_one(warm_ranks, tmp_path, overlap, consensus):
    """A rank's device copies are one model: the average of the ranks' models, not of every
    copy summed (before, a blocking average and consensus added up the copies: with 2
    devices the weights doubled, 3.09 away after 6 steps). The same job with 1 device is
    the reference."""
    env = {"MXKV_MODE": "lasgd", "MXKV_TAU": "2", "MXKV_LASGD_OVERLAP": overlap}
    weights = {}
    for devices in (1, 2):
        out = tmp_path / f"devices{devices}"
        job = launch_in(
            warm_ranks,
            2,
            "train_gluon.py",
            "--out",
            str(out),
            "--devices",
            str(devices),
            "--steps",
            "6",
            *consensus,
            env=env,
        )
        assert job.returncode == 0, job.output
        weights[devices] = load_ranks(out, 2)
    for rank in range(2):
        for name, reference_weight in weights[1][rank].items():
            np.testing.assert_allclose(
                weights[2][rank][name], reference_weight, rtol=0, atol=SPLIT_WITHIN, err_msg=name
            )
