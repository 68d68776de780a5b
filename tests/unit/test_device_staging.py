"""Arrays on a device other than `cpu` take the staging path a GPU's arrays take (pinned
host buffers, MXNet's copies), in one process: a key with copies on `cpu` and
`mx.cpu_pinned(i)` devices sums into every copy, the buffers reused."""

import numpy as np


def test_one_process_sums_its_devices_copies_through_pinned_buffers():
    """A key with copies on cpu(0), cpu_pinned(0) and cpu_pinned(1): the sum reaches every
    copy, the cpu one in place and the others through their buffers, which are reused."""
    import mxnet as mx

    kv = mx.kv.create("hybrid")
    devices = [mx.cpu(0), mx.cpu_pinned(0), mx.cpu_pinned(1)]
    for step in range(2):
        copies = [mx.nd.full((3, 4), step + d, ctx=c) for d, c in enumerate(devices)]
        kv.pushpull(7, copies)
        for copy, device in zip(copies, devices):
            assert copy.context == device
            assert np.array_equal(copy.asnumpy(), np.full((3, 4), 3 * step + 3, np.float32))
    collectives = kv._collectives
    # per step: two copies in and three out, 48 bytes each
    assert collectives.staged_bytes == 2 * 5 * 48
    assert len(collectives._staging._buffers) == 2  # one per pinned device copy, kept
