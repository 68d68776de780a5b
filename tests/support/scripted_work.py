"""A scripted Work for the tests of the supervision loop (launch/supervisor.py)."""

import time
from typing import List, Optional


class Scripted:
    """A Work whose poll gives `codes` in turn (then the last one forever)."""

    running, stopping = "tests", "stopping the test"

    def __init__(self, codes: List[Optional[int]]):
        self.codes, self.polls, self.waited = codes, 0, 0.0

    def poll(self) -> Optional[int]:
        self.polls += 1
        return self.codes[min(self.polls, len(self.codes)) - 1]

    def wait(self, seconds: float) -> None:
        self.waited += seconds
        time.sleep(seconds)
