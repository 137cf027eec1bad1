"""Which output dtypes a task may have, and the default ceiling for each.

TPU kernels mostly compute in bfloat16; a ceiling fit for float32 would fail every honest
bf16 kernel, so without a ``TOLERANCE`` the ceiling follows the least precise floating
output. Integer and bool outputs are compared exactly.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

DEFAULT_TOLERANCE: dict[str, float] = {"atol": 1e-2, "rtol": 1e-2}
# The ceiling when a task declares no TOLERANCE, by the mantissa bits of its least precise
# floating output: float32 (and wider) the default above, float16 wider, bfloat16 wider
# still (as published kernel benchmarks do), 8-bit floats widest. Integer outputs are exact.
_TOLERANCE_BY_MANTISSA: tuple[tuple[int, float], ...] = ((23, 1e-2), (10, 2e-2), (7, 5e-2),
                                                          (0, 1e-1))


def checkable_dtype(dtype: Any) -> bool:
    """Floating (bfloat16 included), integer or bool: what the suite can check."""
    import jax.numpy as jnp

    return bool(jnp.issubdtype(dtype, jnp.floating) or jnp.issubdtype(dtype, jnp.integer)
                or jnp.issubdtype(dtype, jnp.bool_))


def default_tolerance(dtype_names: Sequence[str]) -> dict[str, float]:
    """The default ceiling for outputs of these dtypes (see ``_TOLERANCE_BY_MANTISSA``);
    all-integer outputs get zero: they are compared exactly."""
    import jax.numpy as jnp

    from tools.sandbox.wire import numpy_dtype

    floating = [numpy_dtype(n) for n in dtype_names if jnp.issubdtype(numpy_dtype(n), jnp.floating)]
    if not floating:
        return {"atol": 0.0, "rtol": 0.0} if dtype_names else dict(DEFAULT_TOLERANCE)
    bits = min(int(jnp.finfo(d).nmant) for d in floating)
    value = next(v for floor, v in _TOLERANCE_BY_MANTISSA if bits >= floor)
    return {"atol": value, "rtol": value}
