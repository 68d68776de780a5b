"""Makes MXNet's C++ log write N lines (one per ImageRecordIter it opens), each followed by
one Python line: usage mxnet_log_lines.py DIR N."""

import io
import os
import sys

import mxnet as mx
from PIL import Image

import mxkv_hybrid

directory, count = sys.argv[1], int(sys.argv[2])
rank = mxkv_hybrid.world().rank
path = os.path.join(directory, f"rank{rank}.rec")
records = mx.recordio.MXRecordIO(path, "w")
png = io.BytesIO()
Image.new("RGB", (8, 8)).save(png, format="PNG")
records.write(mx.recordio.pack(mx.recordio.IRHeader(0, 0.0, 0, 0), png.getvalue()))
records.close()
for i in range(count):
    mx.io.ImageRecordIter(
        path_imgrec=path, data_shape=(3, 8, 8), batch_size=1, preprocess_threads=1
    )
    print(f"python line {i}", file=sys.stderr)
