"""Knobs a user can get wrong, each with the message that names the problem: refused by
`Config.from_environment` (tests/unit/test_errors.py) and, in a job, on every rank
(tests/jobs/test_errors.py)."""

BAD_KNOBS = [
    ({"MXKV_MODE": "bogus"}, "MXKV_MODE='bogus' is invalid: expected one of: allreduce"),
    ({"MXKV_BUCKET_MB": "-1"}, "MXKV_BUCKET_MB='-1' is invalid"),
    ({"MXKV_AVERAGE": "maybe"}, "MXKV_AVERAGE='maybe' is invalid"),
    ({"MXKV_BUKET_MB": "4"}, "unknown setting MXKV_BUKET_MB"),
    (
        {"MXKV_FAULT": "kill:rank=1"},
        "MXKV_FAULT='kill:rank=1' is invalid: expected ACTION:rank=R:step=S",
    ),
]
