"""Adversarial: build() tries to take 64 GB of memory (and touch it)."""

import numpy as np


def build():
    hog = np.ones(8 << 30, dtype=np.float64)  # 64 GiB
    return lambda x, w: hog[: x.size].reshape(x.shape)
