"""Says which interpreter runs it and its process id, then ends as asked: `exit N`,
`signal N` (kills itself with signal N) or `sleep` (until killed)."""

import os
import sys
import time

print(f"PROBE pid={os.getpid()} executable={sys.executable}", flush=True)
action, *value = sys.argv[1:]
if action == "exit":
    sys.exit(int(value[0]))
if action == "signal":
    os.kill(os.getpid(), int(value[0]))
while action == "sleep":
    time.sleep(1)
