"""mxkv-launch passes host lists and host files through to mpiexec (here: localhost)."""
import pytest

from conftest import launch


@pytest.mark.parametrize("how", ["hosts", "hostfile"])
def test_host_lists_reach_mpiexec(tmp_path, how):
    if how == "hosts":
        options = ["-H", "localhost:3"]
    else:
        (tmp_path / "hosts").write_text("localhost:3\n")
        options = ["--hostfile", str(tmp_path / "hosts")]
    job = launch(3, "average.py", launcher_options=options)
    assert job.returncode == 0, job.output
    for rank in range(3):
        assert f"RESULT Hybrid rank={rank} of 3 value=[2.0, 2.0, 2.0]" in job.lines_of(rank), \
            job.output
