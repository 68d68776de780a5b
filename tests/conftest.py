"""The suite's shared parts, each a module of tests/support: the tiers (one folder each),
and the fixtures of jobs, references, the tiny ImageNet and emulated hosts."""

pytest_plugins = [
    "support.tiers",
    "support.jobs",
    "support.references",
    "support.convex",
    "support.tiny_imagenet",
    "support.emulated",
    "support.warm_ranks",
    "support.warm_interpreter",
]
