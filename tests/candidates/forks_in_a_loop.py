"""Adversarial: an honest RMSNorm kernel whose build forks in a loop (bounded: 2000 tries,
each child sleeps 30 s and exits, so it cannot hurt a machine whose limit fails), keeps
going when forks are refused, then kills and reaps its children and returns the kernel."""

import os
import signal
import time

import jax
from jax.experimental import pallas as pl

ATTEMPTS = 2000


def _kernel(x_ref, w_ref, o_ref):
    x = x_ref[...]
    ms = (x * x).mean(axis=-1, keepdims=True)
    o_ref[...] = x * jax.lax.rsqrt(ms + 1e-6) * w_ref[...]


def _rmsnorm(x, w):
    return pl.pallas_call(_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(
        x, w.reshape(1, -1))


def build():
    children = []
    for _ in range(ATTEMPTS):
        try:
            pid = os.fork()
        except OSError:
            continue
        if pid == 0:
            time.sleep(30)
            os._exit(0)
        children.append(pid)
    for pid in children:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    return _rmsnorm
