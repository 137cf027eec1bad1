"""OfflineProvider: a deterministic kernel author that answers every purpose without an LLM.

It reads only `request.context` (never the prompt): classifies the task from its jaxpr,
plans levers from the parent's profile, writes the candidate for the kernel class, fixes by
regenerating safer variants, and writes `make_inputs` from a signature. A task it has no
kernel for is refused with `ProviderError("unsupported: <reason>")`, which ends the run.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from typing import Any, ClassVar

from agents.llm.base import LlmRequest, LlmResponse, Provider, ProviderError
from agents.llm.offline import planner
from agents.llm.offline.author import candidate_source, plan_spec, safer_ladder
from agents.llm.offline.check import checked_source
from agents.llm.offline.classify import CLASSES, classify_task
from agents.llm.offline.inputs import inputs_source
from agents.llm.offline.vmemfix import is_compiler_limit_fix, with_compiler_limit

MODEL = "offline-author-1"


def _code_answer(code: str, preface: str = "") -> str:
    return (preface + "\n\n" if preface else "") + "```python\n" + code.rstrip("\n") + "\n```\n"


class OfflineProvider(Provider):
    """Plans, writes and fixes Pallas TPU kernels by rule; seeded and deterministic."""

    name: ClassVar[str] = "offline"

    def __init__(self, *, seed: int = 0, **options: Any) -> None:
        del options  # options meant for other providers (model, temperature, ...) do not apply
        self.seed = seed

    async def complete(self, request: LlmRequest) -> LlmResponse:
        start = time.perf_counter()
        text = await asyncio.to_thread(self.answer, request)
        return LlmResponse(text=text, model=MODEL, seed=self.drawn_seed(request),
                           tokens_in=len(request.prompt) // 4,
                           tokens_out=len(text) // 4,
                           latency_ms=(time.perf_counter() - start) * 1000.0)

    def drawn_seed(self, request: LlmRequest) -> int:
        """The seed the author's choices are drawn with: the context's, else the request's."""
        given = request.context.get("seed")
        return int(given) if isinstance(given, int) else (request.seed or self.seed)

    def answer(self, request: LlmRequest) -> str:
        ctx = dict(request.context)
        ctx["seed"] = self.drawn_seed(request)
        handler = {"plan": self._plan, "implement": self._implement, "fix": self._fix,
                   "inputs": self._inputs}.get(request.purpose)
        if handler is None:
            raise ProviderError(f"the offline author has no answer for purpose {request.purpose!r}")
        try:
            return handler(ctx)
        except ProviderError:
            raise
        except Exception as exc:  # an author bug on a pattern it does not handle: refuse, with why
            first = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ""
            raise ProviderError(f"unsupported: the offline author failed on this task's pattern "
                                f"({type(exc).__name__}{': ' + first if first else ''})") from exc

    def _facts(self, ctx: dict[str, Any]) -> Any:
        """The task's facts; a task the author writes no kernel for is refused here, with
        its reason, so the run ends instead of planning kernels that cannot exist."""
        path = ctx.get("task_path")
        if not path:
            raise ProviderError("the request context has no task_path")
        facts = classify_task(path)
        if facts.unsupported:
            raise ProviderError(f"unsupported: {facts.unsupported}")
        return facts

    def _plan(self, ctx: dict[str, Any]) -> str:
        facts = self._facts(ctx)
        decision = planner.choose(facts, ctx)
        return planner.plan_text(facts, decision, ctx, str(ctx.get("task_name") or "task"))

    def _implement(self, ctx: dict[str, Any]) -> str:
        facts = self._facts(ctx)
        spec = plan_spec(str(ctx.get("plan") or ""))
        params = planner.default_params(facts, ctx.get("chip"))
        given = spec.get("params") if isinstance(spec.get("params"), dict) else {}
        params.update({k: int(v) for k, v in given.items() if k in params and isinstance(v, int) and v > 0})
        carried = getattr(planner.WRITERS.get(facts.kernel_class), "CARRIED_KNOBS", ())
        params.update({k: int(v) for k, v in given.items() if k in carried and isinstance(v, int) and v >= 0})
        wanted = spec.get("kernel_class")
        kernel_class = "single_block" if wanted == "single_block" else facts.kernel_class
        note = (f"Kernel class {facts.kernel_class}"
                + (f" (plan asked for {wanted})" if wanted in CLASSES and wanted != facts.kernel_class else "")
                + f"; parameters {params}.")
        schedule = spec.get("spec") if isinstance(spec.get("spec"), dict) else None
        code = candidate_source(facts, params, str(ctx.get("task_name") or "task"), ctx.get("chip"),
                                kernel_class, schedule)
        return _code_answer(checked_source(code, f"a {kernel_class} kernel"), note)

    def _fix(self, ctx: dict[str, Any]) -> str:
        facts = self._facts(ctx)
        current = str(ctx.get("code") or "")
        diagnostics = list(ctx.get("diagnostics") or [])
        history = list(ctx.get("history") or [])
        message = next((str(d.get("message", "")) for d in diagnostics if isinstance(d, dict)
                        and d.get("message")), "the candidate failed without a diagnostic")
        first_line = message.strip().splitlines()[0][:300] if message.strip() else message
        sized = with_compiler_limit(current, message, ctx.get("chip"))
        if sized is not None:  # the compiler's own count fits the chip: keep the blocks
            return _fixed(*sized, first_line, message)
        params = planner.default_params(facts, ctx.get("chip"))
        ladder = safer_ladder(facts, params, ctx.get("chip"))
        sized_rounds = sum(1 for h in history if isinstance(h, dict)
                           and is_compiler_limit_fix(h.get("fix")))
        level = max(len(history), int(ctx.get("round") or 1) - 1) - sized_rounds
        task_name = str(ctx.get("task_name") or "task")
        for kernel_class, step_params, step_change in ladder[level:] + ladder[:level]:
            code = candidate_source(facts, step_params, task_name, ctx.get("chip"), kernel_class)
            change = step_change
            if _digest(code) != _digest(current):
                break
        else:
            code = candidate_source(facts, params, task_name, ctx.get("chip"))
            change = "regenerated the default kernel of its class"
        return _fixed(code, change, first_line, message)

    def _inputs(self, ctx: dict[str, Any]) -> str:
        return _code_answer(checked_source(inputs_source(ctx.get("signature") or {}), "make_inputs"))


def _fixed(code: str, change: str, first_line: str, message: str) -> str:
    summary = "\n".join([f"Error: {first_line}", f"Cause: {_cause(message)}", f"Fix: {change}."])
    return _code_answer(checked_source(code, "a fixed kernel"), summary)


def _digest(code: str) -> str:
    return hashlib.sha256(code.strip().encode()).hexdigest()


def _cause(message: str) -> str:
    text = message.lower()
    if "vmem" in text:
        return "the blocks (double-buffered) and scratch do not fit the scoped VMEM"
    if "lower" in text or "mosaic" in text or "unimplemented" in text or "not supported" in text:
        return "the Mosaic TPU lowering rejects an op or a block shape of this kernel"
    if "shape" in text or "divisible" in text or "block" in text:
        return "a block shape breaks the (8, 128) tiling rule or does not cover the array"
    if "mismatch" in text or ("error" in text and "max" in text) or "tolerance" in text:
        return "numbers differ from the reference, most likely in a tail block or a mask"
    return "unknown; regenerating with more conservative blocks"
