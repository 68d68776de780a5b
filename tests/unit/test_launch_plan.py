"""The launcher's command line as a typed, frozen plan (launch/launch_plan.py): what
parse_arguments returns, what it implies, and that nothing past the command line reads
argparse's Namespace."""

import ast
import dataclasses

import pytest

from mxkv_hybrid.launch.launch_plan import LaunchPlan
from mxkv_hybrid.launch.launcher import parse_arguments

from support.paths import LAUNCH


def test_the_command_line_becomes_a_frozen_plan(monkeypatch):
    monkeypatch.setenv("MXKV_MODE", "easgd")
    plan = parse_arguments(
        ["-n", "4", "-H", "a:2,b:2", "--servers", "1", "--trusted-network", "--dry-run"]
        + ["--", "python", "t.py"]
    )
    assert isinstance(plan, LaunchPlan)
    assert plan.command == ("python", "t.py")
    assert (plan.group_jobs, plan.group_jobs_by_default) == (True, True)  # filled in once
    assert plan.host_slots() == [("a", 2), ("b", 2)]
    assert plan.count_groups() == 2
    assert [(group.host, group.size) for group in plan.group_plans()] == [("a", 2), ("b", 2)]
    assert not plan.relays_wanted  # --trusted-network
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.num_ranks = 8  # type: ignore[misc]


def test_groups_by_size_without_hosts():
    plan = parse_arguments(["-n", "5", "--group-size", "2", "--dry-run", "--", "python", "t.py"])
    assert plan.host_slots() == [] and plan.count_groups() == 3
    assert [group.size for group in plan.group_plans()] == [2, 2, 1]


def test_nothing_past_the_command_line_takes_argparse_namespace():
    """Every function of launch/ that is given a Namespace: only LaunchPlan.from_arguments
    (and a module's own `main`, which parses its command line)."""
    takers = []
    for path in sorted(LAUNCH.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            annotations = [ast.unparse(a.annotation) for a in node.args.args if a.annotation]
            if any("Namespace" in annotation for annotation in annotations):
                takers.append(f"{path.relative_to(LAUNCH)}:{node.name}")
    assert takers == ["launch_plan.py:from_arguments"], takers
