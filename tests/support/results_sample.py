"""A results file in the shape of examples/benchmarks/results/, for the tests of the
{result} role that renders figures from such files."""

RESULTS_SAMPLE = {
    "rows": [
        {"method": "mpi", "link_mbps": 50.0, "median_s": 0.048127},
        {"method": "hybrid", "link_mbps": 50.0, "median_s": 0.022316},
        {"method": "hybrid", "link_mbps": 0.0, "median_s": 0.5},
    ],
    "a.b c": {"fraction": 0.0734, "tests": 764, "label": "x", "never": float("nan")},
}
