"""A JAXBench-format bf16 matmul at 8192^3 (the size of the Pallas TPU matmul guide's largest
row), for `kernelgraph estimate` at full size and benchmarks/costmodel.py."""

import jax
import jax.numpy as jnp

CONFIG = {"name": "matmul_bf16_8192", "M": 8192, "K": 8192, "N": 8192}


def create_inputs():
    ka, kb = jax.random.split(jax.random.PRNGKey(0))
    a = jax.random.normal(ka, (CONFIG["M"], CONFIG["K"]), jnp.bfloat16)
    b = jax.random.normal(kb, (CONFIG["K"], CONFIG["N"]), jnp.bfloat16)
    return a, b


def workload(a, b):
    return jnp.dot(a, b, preferred_element_type=jnp.float32).astype(jnp.bfloat16)


def get_flops():
    return 2 * CONFIG["M"] * CONFIG["K"] * CONFIG["N"]
