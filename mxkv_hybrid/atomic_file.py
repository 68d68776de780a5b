"""Writing a file so that a reader sees the old or the new content, never a partial one."""

import os
import tempfile


def write_atomically(path: str, data: bytes) -> None:
    """Writes `data` to a unique temporary file beside `path`, flushes it to disk, then renames
    it over `path` (several processes may write the same path at once)."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    with tempfile.NamedTemporaryFile(
        "wb", dir=directory, delete=False, prefix=f".{os.path.basename(path)}."
    ) as tmp:
        try:
            tmp.write(data)
            tmp.flush()
            os.fsync(tmp.fileno())
        except BaseException:
            os.unlink(tmp.name)
            raise
    os.replace(tmp.name, path)
