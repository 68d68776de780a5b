"""Reads the JSON lines that benchmark workers print, with or without mpiexec's rank prefix."""

import json
from typing import List


def json_lines(text: str) -> List[dict]:
    rows = []
    for line in text.splitlines():
        line = line.split("] ", 1)[1] if line.startswith("[") else line
        if line.startswith("{"):
            rows.append(json.loads(line))
    return rows
