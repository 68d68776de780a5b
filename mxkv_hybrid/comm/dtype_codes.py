"""The dtype codes the C++ collectives use (csrc/dtype.h), MXNet's own type flags."""

DTYPE_CODES = {"float32": 0, "float64": 1, "float16": 2, "bfloat16": 12}
