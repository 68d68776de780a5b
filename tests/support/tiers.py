"""The suite's tiers, one folder each, marked by the folder (`pytest -m unit`), and the
groups that pytest-xdist's workers take whole:

- tests/unit: starts no process; seconds, while you work;
- tests/jobs: real MPI jobs, ps-lite servers and relays on this host (127.0.0.1);
- tests/hosts: jobs across hosts emulated by network namespaces (root; CI runs them).

A test of the unit tier that starts a process fails: it belongs in tests/jobs."""

import subprocess
from pathlib import Path
from typing import Iterator

import pytest

from support.paths import TESTS

TIERS = {
    "unit": "starts no process (tests/unit; seconds)",
    "jobs": "starts real jobs, servers or relays on this host (tests/jobs)",
    "hosts": "runs on hosts emulated by network namespaces (tests/hosts; needs root)",
}


class ProcessInUnitTier(RuntimeError):
    """A test of tests/unit started a process."""


def tier_of(item: pytest.Item) -> str:
    """The tier of a collected test: the folder under tests/ it lives in."""
    folder = Path(item.path).resolve().relative_to(TESTS).parts[0]
    if folder not in TIERS:
        raise pytest.UsageError(f"{item.nodeid}: tests live in one of tests/{{{','.join(TIERS)}}}")
    return folder


def worker_group(item: pytest.Item, tier: str) -> str:
    """The tests that run on one of pytest-xdist's workers, one after another (`--dist
    loadgroup`): the emulated hosts' tier as one (each test a cluster of many processes
    and timed faults), every other file as one (its module fixtures made once)."""
    return tier if tier == "hosts" else str(Path(item.path).relative_to(TESTS))


def pytest_configure(config: pytest.Config) -> None:
    for tier, meaning in TIERS.items():
        config.addinivalue_line("markers", f"{tier}: {meaning}")


def pytest_collection_modifyitems(config: pytest.Config, items: list) -> None:
    """Marks each test with its tier; leaves out the fault matrix's cells outside its CI
    sample (`fault_matrix(ci=False)`) unless the marker expression names `fault_matrix`
    (`pytest -m fault_matrix`: the whole matrix)."""
    whole_matrix = "fault_matrix" in (config.getoption("markexpr", "") or "")
    kept, left_out = [], []
    for item in items:
        tier = tier_of(item)
        item.add_marker(getattr(pytest.mark, tier))
        item.add_marker(pytest.mark.xdist_group(worker_group(item, tier)))
        cell = item.get_closest_marker("fault_matrix")
        if cell is not None and not cell.kwargs["ci"] and not whole_matrix:
            left_out.append(item)
        else:
            kept.append(item)
    if left_out:
        config.hook.pytest_deselected(items=left_out)
        items[:] = kept


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem) -> Iterator[None]:
    """A unit test runs with subprocess.Popen refused."""
    if item.get_closest_marker("unit") is None:  # (marked at collection)
        return (yield)
    started = subprocess.Popen.__init__

    def refused(self, args, *rest, **options) -> None:
        raise ProcessInUnitTier(f"a unit test started {args!r}: move the test to tests/jobs")

    subprocess.Popen.__init__ = refused  # type: ignore[method-assign]
    try:
        return (yield)
    finally:
        subprocess.Popen.__init__ = started  # type: ignore[method-assign]
