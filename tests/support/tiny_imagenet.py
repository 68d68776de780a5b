"""The tiny ImageNet of examples/make_tiny_imagenet.py, made once a session."""

import subprocess
import sys
from pathlib import Path

import pytest

from support.paths import EXAMPLES

TINY_IMAGENET_CLASSES = 10  # 64 training and 16 validation images each, 32 x 32 pixels


@pytest.fixture(scope="session")
def tiny_imagenet(tmp_path_factory) -> Path:
    """The tiny ImageNet of examples/make_tiny_imagenet.py (folder and RecordIO), made once."""
    out = tmp_path_factory.mktemp("tiny-imagenet")
    subprocess.run(
        [
            sys.executable,
            str(EXAMPLES / "make_tiny_imagenet.py"),
            "--out",
            str(out),
            "--classes",
            str(TINY_IMAGENET_CLASSES),
            "--size",
            "32",
        ],
        check=True,
        timeout=120,
    )
    return out
