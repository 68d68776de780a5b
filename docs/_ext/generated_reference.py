"""Sphinx directives that write reference tables from the code itself, never by hand:
``{mxkv-knobs}`` from ``config.KNOBS``, ``{mxkv-capabilities}`` from
``capabilities.CAPABILITIES``, ``{mxkv-fault-matrix}`` from the tests' table of faults
(``tests/tables/fault_matrix.py``, whose every cell a test runs), ``{mxkv-trainer-rules}`` from the
tests' table of Trainer rules (``tests/tables/trainer_rules.py``, with MXNet's own decisions
computed as the build runs), ``{mxkv-client-matrix}`` from the tests' client matrix
(``tests/tables/client_matrix.py``), ``{mxkv-faults-throughput}`` from
the results of ``examples/benchmarks/faults_throughput.py`` and ``{mxkv-flags}
module:function`` from a command's argparse parser (mxkv-launch, the planner, the tuner)."""

import argparse
import importlib
import json
import os
import sys
from dataclasses import fields
from pathlib import Path
from typing import Any, Iterable, List, Mapping, Optional

from docutils import nodes
from docutils.parsers.rst import Directive
from sphinx.application import Sphinx


def cell(text: str) -> str:
    """One Markdown table cell: no line breaks, `|` escaped."""
    return " ".join(str(text).split()).replace("|", "\\|")


def knob_table(knobs: Mapping[str, Any], internal: bool = False) -> str:
    """The Markdown table of the knobs a user sets (or, `internal`, of those mxkv-launch sets
    for its ranks): name, default and documentation."""
    rows = ["| variable | default | meaning |", "|---|---|---|"]
    rows += [
        f"| `{name}` | `{cell(knob.default)}` | {cell(knob.doc)} |"
        for name, knob in knobs.items()
        if knob.internal == internal
    ]
    return "\n".join(rows)


def capability_table(capabilities: Mapping[str, object]) -> str:
    """The Markdown table of what each mode can do: a row per capability (with its
    documentation), a column per mode."""
    rows_of = fields(next(iter(capabilities.values())))
    modes = list(capabilities)
    rows = [
        "| capability | " + " | ".join(f"`{mode}`" for mode in modes) + " | what it means |",
        "|---|" + "---|" * len(modes) + "---|",
    ]
    rows += [
        f"| `{field.name}` | "
        + " | ".join("yes" if getattr(capabilities[mode], field.name) else "—" for mode in modes)
        + f" | {cell(field.metadata.get('doc', ''))} |"
        for field in rows_of
    ]
    return "\n".join(rows)


def _flag_names(action: argparse.Action) -> str:
    if not action.option_strings:
        return f"`{action.metavar or action.dest}`"
    value = "" if action.nargs == 0 else f" {action.metavar or action.dest.upper()}"
    return ", ".join(f"`{flag}{value}`" for flag in action.option_strings)


def _flag_help(action: argparse.Action) -> str:
    text = (action.help or "") % {"default": action.default, "prog": ""}
    if action.choices:
        text += f" (one of: {', '.join(map(str, action.choices))})"
    if (
        action.default not in (None, False, argparse.SUPPRESS)
        and action.option_strings
        and "%(default)" not in (action.help or "")
    ):
        text += f" (default: `{action.default}`)"
    return cell(text)


def flag_tables(parser: argparse.ArgumentParser) -> str:
    """One Markdown table per argument group of `parser`: flag, what it does."""
    sections: List[str] = []
    for group in parser._action_groups:
        actions: Iterable[argparse.Action] = [
            action
            for action in group._group_actions
            if action.help != argparse.SUPPRESS and not isinstance(action, argparse._HelpAction)
        ]
        if not actions:
            continue
        rows = [f"**{group.title}**", "", "| flag | what it does |", "|---|---|"]
        rows += [f"| {_flag_names(action)} | {_flag_help(action)} |" for action in actions]
        sections.append("\n".join(rows))
    return "\n\n".join(sections)


class MarkdownDirective(Directive):
    """A directive whose output is Markdown text, parsed in place by MyST."""

    def markdown(self) -> str:
        raise NotImplementedError

    def run(self) -> List[nodes.Node]:
        container = nodes.container()
        self.state.nested_parse(self.markdown().splitlines(), self.content_offset, container)
        return container.children


class KnobsDirective(MarkdownDirective):
    optional_arguments = 1  # "internal": the knobs mxkv-launch sets

    def markdown(self) -> str:
        from mxkv_hybrid.config import KNOBS

        return knob_table(KNOBS, internal=self.arguments == ["internal"])


class CapabilitiesDirective(MarkdownDirective):
    def markdown(self) -> str:
        from mxkv_hybrid.capabilities import CAPABILITIES

        return capability_table(CAPABILITIES)


def fault_matrix_table(
    cells: Iterable[Any],
    faults: Mapping[str, Any],
    paths: Mapping[str, Any],
    measured: Optional[Mapping[tuple, Mapping[str, Any]]] = None,
) -> str:
    """The Markdown table of the fault matrix: a row per cell, with its outcome and exit
    status, whether CI runs it (the others run under `pytest -m fault_matrix`), and from
    the last whole run (`measured`, by (fault, path, mode, moment)) how many seconds after
    the fault the member was named and the job was over."""
    columns = "fault | launch path | mode | moment | outcome | exit status | in CI "
    rows = [f"| {columns}| named after (s) | over after (s) |", "|---" * 9 + "|"]
    for c in cells:
        run = (measured or {}).get((c.fault, c.path, c.mode, c.moment), {})
        named, ended = run.get("named_after_s"), run.get("ended_after_s")
        rows.append(
            f"| {cell(faults[c.fault][0])} | {cell(paths[c.path][0])} | `{c.mode}` | {c.moment} "
            f"| {cell(c.outcome)} | {c.status} | {'yes' if c.ci else '—'} "
            f"| {'—' if named is None else f'{named:.1f}'} "
            f"| {'—' if ended is None else f'{ended:.1f}'} |"
        )
    return "\n".join(rows)


def measured_cells(path: Path) -> Mapping[tuple, Mapping[str, Any]]:
    """examples/benchmarks/fault_matrix.py's results, by (fault, path, mode, moment)."""
    if not path.exists():
        return {}
    cells = json.loads(path.read_text())["cells"]
    return {(c["fault"], c["path"], c["mode"], c["moment"]): c for c in cells}


def tests_module(name: str) -> Any:
    """A module of the repository's tests/ folder (the tables the tests run)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.pop(0)


class FaultMatrixDirective(MarkdownDirective):
    def markdown(self) -> str:
        root = Path(__file__).resolve().parents[2]
        fault_matrix = tests_module("tables.fault_matrix")
        measured = measured_cells(root / "examples/benchmarks/results/fault_matrix.json")
        return fault_matrix_table(
            fault_matrix.CELLS, fault_matrix.FAULTS, fault_matrix.PATHS, measured
        )


def trainer_rules_table(table: Any, decided: Mapping[str, Mapping[Any, Any]]) -> str:
    """The Markdown table of the Trainer rules: a row per (weight, gradient,
    update_on_kvstore), a column per MXNet store with the modes that stand in for it, and
    where a mode decides otherwise, both decisions and a numbered reason below."""
    stores = list(table.COUNTERPARTS)
    modes_of = {s: [m for m in table.MODES if table.COUNTERPART_OF[m] == s] for s in stores}
    headers = [
        f"`{s.replace('_p3', '')}`{' over P3' if s.endswith('_p3') else ''}: "
        + ", ".join(f"`{m}`" for m in modes_of[s])
        for s in stores
    ]
    rows = [
        "| weight | gradient | update_on_kvstore | " + " | ".join(headers) + " |",
        "|---" * (3 + len(stores)) + "|",
    ]
    reasons: List[str] = []
    for c in table.CELLS:
        entries = []
        for store in stores:
            mxnet = table.describe(decided[store][c])
            differing = {
                m: table.DIFFERENCES[(m, c)] for m in modes_of[store] if (m, c) in table.DIFFERENCES
            }
            for outcome, why in differing.values():
                if why not in reasons:
                    reasons.append(why)
                number = reasons.index(why) + 1
                names = ", ".join(f"`{m}`" for m in differing)
                mxnet = f"MXNet: {mxnet}; {names}: {table.describe(outcome)} ({number})"
                break
            entries.append(cell(mxnet))
        rows.append(
            f"| `{c.weight}` | `{c.gradient}` | `{c.update_on_kvstore}` | "
            + " | ".join(entries)
            + " |"
        )
    notes = [f"({i}) {why}." for i, why in enumerate(reasons, start=1)]
    return "\n".join(rows) + "\n\n" + "\n\n".join(notes)


def mxnet_decisions(table: Any) -> Mapping[str, Mapping[Any, Any]]:
    """MXNet's own Trainer decisions on each store of the table, every cell."""
    decided = {}
    for store in table.COUNTERPARTS:
        run = table.run_reference(store, dict(os.environ))
        if run.returncode != 0:
            raise RuntimeError(f"MXNet's Trainer rules on {store} failed:\n{run.stderr}")
        decided[store] = table.outcomes_in(run.stdout)
    return decided


class TrainerRulesDirective(MarkdownDirective):
    def markdown(self) -> str:
        table = tests_module("tables.trainer_rules")
        return trainer_rules_table(table, mxnet_decisions(table))


def client_matrix_table(matrix: Any) -> str:
    """The Markdown table of the client matrix: a row per client (what it uses), a column
    per mode saying whether the suite runs it there on one host and across 2 emulated
    hosts, or why the client does not apply."""
    rows = [
        "| client | what it uses | " + " | ".join(f"`{m}`" for m in matrix.MODES) + " |",
        "|---|---|" + "---|" * len(matrix.MODES),
    ]
    for c in matrix.CLIENTS:
        entries = [
            c.not_in[m]
            if m in c.not_in
            else "1 host" + (", 2 hosts" if matrix.ACROSS_HOSTS.get(m) == c.name else "")
            for m in matrix.MODES
        ]
        rows.append(f"| {cell(c.name)} | {cell(c.uses)} | " + " | ".join(map(cell, entries)) + " |")
    return "\n".join(rows)


class ClientMatrixDirective(MarkdownDirective):
    def markdown(self) -> str:
        return client_matrix_table(tests_module("tables.client_matrix"))


def faults_throughput_tables(throughput: Mapping[str, Any], alarms: Mapping[str, Any]) -> str:
    """examples/benchmarks/faults_throughput.py's results as Markdown: per mode, each group's
    and the whole job's quiet steps per second and the fraction kept under faults, the time
    from each fault to its group's next step, and the false alarms of its quiet runs."""
    columns = ["group 0 (h1)", "group 1 (h2)", "group 2 (h3)", "whole job"]
    keys = ["0", "1", "2", "job"]
    rows = ["| mode | | " + " | ".join(columns) + " |", "|---" * 6 + "|"]
    for mode, summary in throughput["summary"].items():
        quiet, kept = summary["quiet_steps_per_s"], summary["fraction_kept"]
        rows.append(
            f"| `{mode}` | quiet steps/s | " + " | ".join(f"{quiet[k]:.1f}" for k in keys) + " |"
        )
        rows.append("| | kept under faults | " + " | ".join(f"{kept[k]:.2f}" for k in keys) + " |")
    recoveries = ["| mode | at (s) | fault | host | its group trained again after (s) |"]
    recoveries.append("|---" * 5 + "|")
    for mode, summary in throughput["summary"].items():
        for fault in summary["recoveries"][0]:
            after = fault["recovered_after_s"]
            recoveries.append(
                f"| `{mode}` | {fault['at_s']:.0f} | {fault['fault']} | {fault['host']} "
                f"| {'not within a minute' if after is None else f'{after:.1f}'} |"
            )
    loads = [run["load_average_1min"] for run in alarms["runs"]]
    line = (
        f"False alarms: {alarms['false_alarms']} in {len(alarms['runs'])} quiet runs of "
        f"{alarms['minutes_per_run']:g} minutes ({alarms['host_minutes']} host-minutes "
        f"watched) at `MXKV_LOST_SECONDS={alarms['lost_seconds']:g}`, the test suite "
        f"running beside them (load average {min(loads):.1f}-{max(loads):.1f} on this "
        "machine's 2 cores)."
    )
    return "\n".join(rows) + "\n\n" + "\n".join(recoveries) + "\n\n" + line


class FaultsThroughputDirective(MarkdownDirective):
    def markdown(self) -> str:
        results = Path(__file__).resolve().parents[2] / "examples/benchmarks/results"
        throughput = json.loads((results / "faults_throughput.json").read_text())
        alarms = json.loads((results / "false_alarms.json").read_text())
        return faults_throughput_tables(throughput, alarms)


class FlagsDirective(MarkdownDirective):
    required_arguments = 1  # module:function that returns the parser

    def markdown(self) -> str:
        module, function = self.arguments[0].split(":")
        return flag_tables(getattr(importlib.import_module(module), function)())


def setup(app: Sphinx) -> dict:
    app.add_directive("mxkv-knobs", KnobsDirective)
    app.add_directive("mxkv-capabilities", CapabilitiesDirective)
    app.add_directive("mxkv-fault-matrix", FaultMatrixDirective)
    app.add_directive("mxkv-trainer-rules", TrainerRulesDirective)
    app.add_directive("mxkv-client-matrix", ClientMatrixDirective)
    app.add_directive("mxkv-faults-throughput", FaultsThroughputDirective)
    app.add_directive("mxkv-flags", FlagsDirective)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
