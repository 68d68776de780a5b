"""What the tests share: jobs, references, checks, emulated hosts and their fixtures
(registered by tests/support/jobs.py), and the tiers."""
