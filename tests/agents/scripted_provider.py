"""A provider that follows a script, so a test decides what each iteration's kernel is.

It keeps no state: the answer depends only on the request (iteration, purpose, fix round,
re-ask), so agents in separate processes answer alike.

Used as `--provider scripted_provider:ScriptedProvider` with `provider_options={"script":
NAME}`. Kernels are RMSNorm row-tiled Pallas kernels (for tests/evaltasks/rmsnorm_small.py)
that are broken, wrong, or right with a chosen block size, so the simulated latency orders
them: fewer, larger blocks are cheaper.
"""

from __future__ import annotations

from typing import Any, ClassVar

from agents.llm.base import PLAN_SECTIONS, LlmRequest, LlmResponse, Provider

KERNEL = '''"""RMSNorm, one block of rows per grid step."""
import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

TUNABLES = {{"block_rows": {blocks}}}


def _kernel(x_ref, w_ref, o_ref):
    x = x_ref[...].astype(jnp.float32)
    ms = jnp.mean(x * x, axis=-1, keepdims=True)
    o_ref[...] = (x * jax.lax.rsqrt(ms + 1e-6) * w_ref[...] * {scale}).astype(o_ref.dtype)


def build(block_rows={default}):
    @jax.jit
    def rmsnorm(x, w):
        rows, hidden = x.shape
        block = {block_expr}
        return pl.pallas_call(
            _kernel,
            out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
            grid=(pl.cdiv(rows, block),),
            in_specs=[pl.BlockSpec((block, hidden), lambda i: (i, 0)),
                      pl.BlockSpec((1, hidden), lambda i: (0, 0))],
            out_specs=pl.BlockSpec((block, hidden), lambda i: (i, 0)),
            compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel",)),
        )(x, w.reshape(1, hidden))

    return rmsnorm
'''


def kernel(blocks: list[int], *, scale: float = 1.0, broken: bool = False) -> str:
    block_expr = "7" if broken else "min(block_rows, rows)"
    return KERNEL.format(blocks=blocks, default=blocks[0], scale=scale, block_expr=block_expr)


GOOD_FAST = kernel([64, 32])
GOOD_SLOW = kernel([8])
MEDIUM = kernel([64])
RETUNABLE = kernel([8, 256])  # its default is the slow block; its other one the fastest
WRONG = kernel([64], scale=2.0)
BROKEN = kernel([64], broken=True)

SCRIPTS: dict[str, dict[int, list[str]]] = {
    # iteration -> the implementer's kernel, then the fixer's for rounds 1, 2, ... (the last repeats)
    "broken_wrong_fast_slow": {1: [BROKEN, BROKEN, BROKEN], 2: ["no code here, sorry", WRONG],
                               3: [GOOD_FAST], 4: [GOOD_SLOW]},
    "fixed_once": {1: [BROKEN, GOOD_FAST], 2: [GOOD_SLOW]},
    "good": {i: [GOOD_FAST] for i in range(1, 10)},
    "malformed_then_good": {1: ["no code here, sorry", GOOD_FAST]},
    "fast_then_slow_child": {i: [GOOD_FAST] for i in range(1, 10)},
    "medium_then_retunable_child": {i: [MEDIUM] for i in range(1, 10)},
}

CHILD_SCRIPTS: dict[str, dict[int, list[str]]] = {
    # what a node grown from a kernel (its request has a parent) writes instead
    "fast_then_slow_child": {1: [GOOD_SLOW], **{i: [GOOD_FAST] for i in range(2, 10)}},
    "medium_then_retunable_child": {1: [RETUNABLE], **{i: [MEDIUM] for i in range(2, 10)}},
}


INPUT_MAKER = """```python
def make_inputs(key, shape_index=0):
    import jax
    import jax.numpy as jnp

    shapes = SHAPES[shape_index]
    keys = jax.random.split(key, len(shapes))
    return tuple(jax.random.normal(k, s, jnp.float32) for k, s in zip(keys, shapes))
```
"""


def plan(iteration: int, written: int = 0) -> str:
    """A plan whose strategy line says how many of the run's written plans it was told of."""
    body = "\n\n".join(f"## {s}\n\nIteration {iteration}: {s.lower()}"
                       + (f", after {written} written plans." if s == "Strategy" else ".")
                       for s in PLAN_SECTIONS)
    return f"# Plan\n\n{body}\n"


class ScriptedProvider(Provider):
    name: ClassVar[str] = "scripted"

    def __init__(self, *, script: str = "good", **_: Any) -> None:
        self.script = SCRIPTS[script]
        self.child_script = CHILD_SCRIPTS.get(script, self.script)

    async def complete(self, request: LlmRequest) -> LlmResponse:
        iteration = int(request.context.get("iteration", 0))
        if request.purpose == "plan":
            text = plan(iteration, len(request.context.get("written_plans") or []))
        elif request.purpose == "inputs":
            text = INPUT_MAKER
        else:
            script = self.child_script if request.context.get("parent") else self.script
            answers = script[iteration]  # a KeyError is a bug the agent base fails at once
            index = int(request.context.get("round", 0)) if request.purpose == "fix" else 0
            if request.purpose == "implement":
                index = request.attempt  # 1: the answer to the re-ask after a malformed one
            body = answers[min(index, len(answers) - 1)]
            text = body if "def build" not in body else (
                "Error: see diagnostics\nCause: block rows\nFix: aligned blocks\n\n"
                f"```python\n{body}```\n")
        return LlmResponse(text=text, model="scripted-1", tokens_in=len(request.prompt) // 4,
                           tokens_out=len(text) // 4, latency_ms=1.0)
