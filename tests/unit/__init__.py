"""The unit tier: tests that start no process (seconds; `pytest tests/unit`)."""
