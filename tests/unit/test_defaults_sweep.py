"""examples/defaults_sweep.py's own arithmetic: every swept knob and value is one that
examples/convergence.py and the package accept, and a value is called good only where it
is within the bound of allreduce in every row (the sweeps themselves run by hand: minutes
of training per value)."""

import sys

from mxkv_hybrid.config import KNOBS

from support.paths import EXAMPLES

sys.path.insert(0, str(EXAMPLES))

import defaults_sweep

import convergence


def test_every_value_is_a_configuration_convergence_runs_that_sets_the_knob_swept():
    for sweep in defaults_sweep.SWEEPS.values():
        for value, tau, text in defaults_sweep.configurations_of(sweep, [8, 128]):
            configuration = convergence.parse_configuration(text)
            if value == defaults_sweep.RULE:  # the package's rule: the knob left unset
                assert sweep.knob in KNOBS and sweep.knob not in configuration.env
            elif sweep.knob:
                assert sweep.knob in KNOBS and configuration.env[sweep.knob] == value
            else:  # a quantity a rule computes: the script's momentum, which the servers run
                assert configuration.momentum == float(value)
            if sweep.taus:
                assert configuration.env["MXKV_TAU"] == str(tau)


def summary(baseline: float, by_value: dict) -> list:
    rows = [
        {
            "configuration": "allreduce",
            "link_mbps": 0.0,
            "final_accuracy": [baseline],
            "seeds": [42],
            "mean_final_accuracy": baseline,
        }
    ]
    for value, accuracy in by_value.items():
        rows.append(
            {
                "configuration": f"async damping={value}",
                "link_mbps": 0.0,
                "final_accuracy": [accuracy],
                "seeds": [42],
                "mean_final_accuracy": accuracy,
            }
        )
    return rows


def test_a_value_is_good_only_within_the_bound_in_every_row():
    knob = "MXKV_ASYNC_DAMPING"
    by_value = {"none": 0.10, "staleness": 0.945, "momentum": 0.949, "rate": 0.95}
    rows = defaults_sweep.rows_of(knob, "digits", 2, summary(0.95, by_value))
    ran = ["none", "staleness", "momentum"]  # rate, within where it ran, not run here
    by_value = {"none": 0.95, "staleness": 0.93, "momentum": 0.941}
    rows += defaults_sweep.rows_of(knob, "digits", 4, summary(0.95, by_value), values=ran)
    gaps = {(r["value"], r["groups"]): round(r["gap_points"], 1) for r in rows}
    assert gaps[("none", 2)] == -85.0 and gaps[("staleness", 4)] == -2.0
    assert gaps[("momentum", 4)] == -0.9 and ("rate", 4) not in gaps
    assert defaults_sweep.table(knob, rows, 1.0).splitlines()[-1].endswith(": momentum")
