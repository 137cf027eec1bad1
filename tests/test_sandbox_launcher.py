"""The launcher works wherever Python lives, and sandboxes cannot see each other.

Real namespaces, a real virtualenv and real sandboxed children: a verifier whose virtualenv
lies under one hidden directory of a home (mode 0700) that also holds its base interpreter
gets the full sandbox (uid 65534, PID 1, nothing writable outside its folder); two children
running at once cannot list or read each other's folder, and /tmp holds only their own.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tools.sandbox import namespaces, wire
from tools.sandbox.launcher import Limits, Mailbox, run_sandboxed

ROOT = Path(__file__).resolve().parent.parent


def _code_under_tmp() -> set[str]:
    """The /tmp entries a child sees, read-only, because the code it runs lives there (a
    checkout or virtualenv cloned under /tmp): everything else in its /tmp is its own."""
    tmp = Path("/tmp")
    paths = [ROOT, Path(sys.prefix), *map(Path, namespaces._needed_paths())]
    return {p.relative_to(tmp).parts[0] for p in paths if p.is_relative_to(tmp) and p != tmp}
_EMPTY = wire.EvalRequest(candidate_file="candidate.py", config={}, groups=(), order_seed=0)

pytestmark = pytest.mark.skipif(
    sys.platform != "linux" or os.geteuid() != 0 or not namespaces.namespaces_available(),
    reason="the full sandbox needs Linux namespaces and a root verifier")

# A candidate that reports, through the error its import raises, who it is and where it
# could write (the paths to try are put in by the test).
_REPORT = '''
import json, os
wrote = []
for where in {targets!r}:
    path = os.path.join(where, "kg-escaped")
    try:
        with open(path, "w") as f:
            f.write("kg")
        wrote.append(where)
    except OSError:
        pass
inside = os.path.join(os.environ["HOME"], "kg-inside")
with open(inside, "w") as f:
    f.write("kg")
raise RuntimeError("report " + json.dumps({{"uid": os.getuid(), "pid": os.getpid(),
                   "wrote": wrote, "inside": os.path.exists(inside),
                   "tmp": sorted(os.listdir("/tmp"))}}))


def build():
    raise AssertionError("never reached")
'''

_VERIFIER = """
import json, sys
from pathlib import Path
from tools.sandbox import namespaces, wire
from tools.sandbox.launcher import Limits, run_sandboxed
request = wire.EvalRequest(candidate_file="candidate.py", config={}, groups=(), order_seed=0)
box = run_sandboxed("tools.child.worker", wire.encode(request),
                    files={"candidate.py": Path(sys.argv[1]).read_bytes()},
                    limits=Limits(wall_s=120))
error = wire.decode(box.result, wire.EvalResponse).load_error if box.ok else box.failure()
probe = getattr(namespaces, "probe", None)  # (the launcher before it had none)
print(json.dumps({"isolation": list(box.isolation), "error": error, "prefix": sys.prefix,
                  "base": sys.base_prefix, "problem": probe().problem if probe else ""}))
"""

# Run as root in a mount namespace of its own: the base interpreter is bound under the
# hidden home (as ~/.pyenv would hold it), a virtualenv made from it under ~/.cache, and the
# project reached through a .pth file; then the verifier runs on that virtualenv.
_SETUP = r"""
set -e
home="$1"; base="$2"; python="$3"; project="$4"; site="$5"; candidate="$6"
mount --make-rprivate /
mkdir -p "$home/.pyenv/versions/kg" "$home/.cache" "$home/.ssh"
echo "kg-home-secret" > "$home/.ssh/id_kg"
mount --bind "$base" "$home/.pyenv/versions/kg"
chmod 700 "$home" "$home/.cache"
"$home/.pyenv/versions/kg/bin/$python" -m venv --without-pip "$home/.cache/kgvenv"
venv_site=$("$home/.cache/kgvenv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
printf '%s\n%s\n' "$site" "$project" > "$venv_site/kg-project.pth"
cd "$project"
exec "$home/.cache/kgvenv/bin/python" -c "$VERIFIER" "$candidate"
"""


def test_a_virtualenv_under_a_hidden_home_gets_the_full_sandbox(tmp_path: Path) -> None:
    """Two needed entries (~/.pyenv, ~/.cache) under one directory others cannot enter, the
    second hidden again: the old launcher failed its probe there ("special device
    .../.kg-stage/.pyenv does not exist") and ran the candidate as uid 0 in the host's
    namespaces."""
    parent = Path("/var/tmp")
    if not os.access(parent, os.W_OK):
        pytest.skip("/var/tmp is not writable")
    home = Path(tempfile.mkdtemp(prefix="kg-home-", dir=parent))  # outside the private /tmp
    try:
        targets = ["/", "/tmp", "/var/tmp", str(home), str(home / ".cache"), str(ROOT)]
        candidate = tmp_path / "report.py"
        candidate.write_text(_REPORT.format(targets=targets))
        python = f"python{sys.version_info.major}.{sys.version_info.minor}"
        out = subprocess.run(
            ["unshare", "--mount", "--", "/bin/sh", "-c", _SETUP, "kg-setup", str(home),
             sys.base_prefix, python, str(ROOT), sysconfig.get_paths()["purelib"],
             str(candidate)],
            capture_output=True, text=True, timeout=300,
            env={**os.environ, "VERIFIER": _VERIFIER, "KG_ALLOW_WEAK_SANDBOX": ""})
        assert out.returncode == 0, out.stderr[-3000:]
        result = json.loads(out.stdout.strip().splitlines()[-1])
        assert result["prefix"] == str(home / ".cache" / "kgvenv"), result
        assert result["base"] == str(home / ".pyenv" / "versions" / "kg"), result
        assert result["problem"] == "", result
        assert "uid-65534" in result["isolation"] and "private-tmp" in result["isolation"]
        assert "weak-sandbox-allowed" not in result["isolation"], result
        report = json.loads(result["error"].split("report ", 1)[1])
        assert report["uid"] == 65534 and report["pid"] == 1, report
        assert report["wrote"] == [] and report["inside"], report
        own = [e for e in report["tmp"] if e not in _code_under_tmp()]
        assert len(own) == 1 and own[0].startswith("kg-sandbox-"), report
        assert not list(home.glob("**/kg-escaped")) and not (ROOT / "kg-escaped").exists()
    finally:
        shutil.rmtree(home, ignore_errors=True)
        for where in targets:  # what an unconfined candidate left (none in the sandbox)
            Path(where, "kg-escaped").unlink(missing_ok=True)


_SNOOP = '''
import os
target = {target!r}
seen = []
try:
    seen.append("listed:" + ",".join(sorted(os.listdir(target))))
except OSError as exc:
    seen.append(f"list-refused:{{type(exc).__name__}}")
try:
    with open(os.path.join(target, "candidate.py")) as f:
        seen.append("read:" + f.read())
except OSError as exc:
    seen.append(f"read-refused:{{type(exc).__name__}}")
seen.append("tmp:" + ",".join(sorted(os.listdir("/tmp"))))
raise RuntimeError("snoop " + " | ".join(seen))


def build():
    raise AssertionError("never reached")
'''


def test_concurrent_children_cannot_read_each_others_folders() -> None:
    """One child waits in its folder (with a secret in its source); another, started while
    it runs, tries to list and read that folder: it sees nothing of it, and its /tmp holds
    only its own folder. The folder is 0700 and owned by the sandbox uid."""
    secret = "kg-victim-secret-51c3"
    mailbox = Mailbox()
    victim: dict[str, object] = {}
    thread = threading.Thread(target=lambda: victim.update(box=run_sandboxed(
        "tools.child.worker", None, mailbox=mailbox, limits=Limits(wall_s=60.0),
        files={"candidate.py": f"SECRET = {secret!r}\n".encode()})))
    thread.start()
    try:
        assert mailbox.started(60.0), "the first child never started"
        target = str(mailbox._box)
        info = os.stat(target)
        assert oct(info.st_mode & 0o777) == oct(0o700)
        assert info.st_uid == namespaces.SANDBOX_UID
        snoop = run_sandboxed("tools.child.worker", wire.encode(_EMPTY),
                              limits=Limits(wall_s=60.0),
                              files={"candidate.py": _SNOOP.format(target=target).encode()})
        assert snoop.ok, snoop.failure()
        error = wire.decode(snoop.result, wire.EvalResponse).load_error
        assert "snoop" in error, error
        assert secret not in error, error
        assert "list-refused" in error and "read-refused" in error, error
        seen = error.split("tmp:", 1)[1].split()[0].split(",")
        own = [e for e in seen if e not in _code_under_tmp()]
        assert len(own) == 1 and own[0].startswith("kg-sandbox-"), error
        assert Path(target).name not in seen
    finally:
        mailbox.cancel()
        thread.join(60)


_GROUP_DEVICE = b"""
import os
with open(%r, "wb") as f:
    f.write(b"kg")
raise RuntimeError(f"device: written uid={os.getuid()} groups={sorted(os.getgroups())}")
"""


def test_a_device_usable_through_its_group_keeps_the_uid_drop() -> None:
    """A node others cannot use but a non-root group can (0660, that group) is reached by
    joining that group: the child still runs as uid 65534, the full sandbox."""
    node = Path(f"/dev/kg-test-null-{os.getpid()}")
    gid = 5  # a non-root group; only its number matters here
    os.mknod(node, 0o600 | 0o020000, os.makedev(1, 3))  # a character device: /dev/null's
    try:
        os.chown(node, 0, gid)
        node.chmod(0o660)
        box = run_sandboxed("tools.child.worker", wire.encode(_EMPTY), devices=[str(node)],
                            files={"candidate.py": _GROUP_DEVICE % str(node)},
                            limits=Limits(wall_s=60.0))
        assert box.ok, box.failure()
        error = wire.decode(box.result, wire.EvalResponse).load_error
        # (in a user namespace of its own the group shows as the overflow gid, 65534)
        assert f"written uid={namespaces.SANDBOX_UID} groups=" in error, error
        assert namespaces.device_groups([str(node)]) == [gid]
        assert "uid-65534" in box.isolation and "weak-sandbox-allowed" not in box.isolation
    finally:
        node.unlink(missing_ok=True)


def test_a_delivery_sets_the_wall_limit_it_counts_from() -> None:
    """A wall limit given with the request replaces the launch's, longer (a large suite's
    runner) or shorter, and a child killed at it is told by that limit."""
    sleeper = b"import time\ntime.sleep(4)\nraise RuntimeError('slept')\n"
    for launch_s, delivered_s in ((1.0, 30.0), (60.0, 1.5)):
        mailbox = Mailbox()
        with ThreadPoolExecutor(1) as pool:
            launched = pool.submit(run_sandboxed, "tools.child.worker", None, mailbox=mailbox,
                                   files={"candidate.py": sleeper},
                                   limits=Limits(wall_s=launch_s, cpu_wall_s=30.0))
            try:
                assert mailbox.started(60.0), "the child never started"
                mailbox.deliver(wire.encode(_EMPTY), wall_s=delivered_s)
                box = launched.result(90)
            finally:
                mailbox.kill()
        assert box.limits.wall_s == delivered_s
        if delivered_s > launch_s:
            assert box.ok, box.failure()
            assert "slept" in wire.decode(box.result, wire.EvalResponse).load_error
        else:
            assert box.timed_out and "time limit of 1.5 s" in box.failure()
