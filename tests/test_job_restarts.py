"""mxkv_hybrid.checkpoint.load_latest: a script goes on from its last checkpoint, on the same
trajectory as a run that never stopped."""
import numpy as np

from conftest import run_reference

STEPS, EVERY = 40, 8


def test_one_process_resumes_on_the_same_trajectory(tmp_path):
    """The store updates the weights itself here: loading the checkpoint must keep the
    optimizer's loaded momentum (MXNet resets the Trainer's store when weights are loaded)."""
    run_reference("resume_steps.py", str(tmp_path / "a"), str(tmp_path / "ca"), "16", str(EVERY))
    output = run_reference("resume_steps.py", str(tmp_path / "a"), str(tmp_path / "ca"),
                           str(STEPS), str(EVERY))
    assert "starts at step 16" in output
    run_reference("resume_steps.py", str(tmp_path / "b"), str(tmp_path / "cb"), str(STEPS),
                  str(EVERY))
    resumed, straight = (dict(np.load(tmp_path / d / "rank0.npz")) for d in ("a", "b"))
    for name in straight:
        assert np.array_equal(resumed[name], straight[name]), name
