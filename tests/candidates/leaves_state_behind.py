"""Adversarial: tries to leave state for the next sandbox and to reach the host's settings.

At import it writes a file into /dev (which a later sandbox, or a concurrent tune worker,
could read), into /sys and /proc/sys, into the home of the verifier's user, and notes its
uid. It reports what worked in the message of the error it raises, so a test can read it
from the child's load error without any side channel.
"""

import os

ATTEMPTS = {
    "/dev/kg-left-behind": "dev",
    "/sys/kernel/kg-left-behind": "sys",
    "/proc/sys/kernel/hostname": "proc-sys",
    "/root/kg-left-behind": "home",
}

worked = []
for path, name in ATTEMPTS.items():
    try:
        with open(path, "w") as f:
            f.write("kg")
        worked.append(name)
    except OSError:
        pass
if os.path.exists("/dev/kg-left-behind-before"):
    worked.append("found-earlier-dev-file")
if os.getuid() == 0:
    worked.append("uid-0")
raise RuntimeError(f"sandbox report: wrote={','.join(worked) or 'nothing'} uid={os.getuid()}")


def build():
    raise AssertionError("never reached")
