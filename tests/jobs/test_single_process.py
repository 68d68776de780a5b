"""Without `import mxkv_hybrid`, `mx.kv.create('hybrid')` in a fresh process silently makes
MXNet's local store of one worker."""

import subprocess
import sys


def test_without_the_import_mxnet_silently_makes_a_local_store():
    code = (
        "import mxnet as mx; kv = mx.kv.create('hybrid'); print(type(kv).__name__, kv.num_workers)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["KVStore", "1"]
