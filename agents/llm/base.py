"""The one interface every LLM provider implements, and how a provider is found by name.

Call order: `get_provider(name, **options)` builds one provider per process; agents call
`await provider.complete(request)` any number of times, concurrently; `await
provider.aclose()` once at shutdown. A provider never writes events: the agent base
records every call as an `LlmCalled` event (prompt and response stored as artifacts).

A request carries the rendered `prompt` (what a language model reads, and what is recorded)
and the same facts as structured `context` (what the offline author reads, so it never has
to parse prose). The context keys per purpose are listed in `CONTEXT_KEYS`.
"""

from __future__ import annotations

import abc
import importlib
import importlib.metadata
from typing import Any, ClassVar, Literal

import msgspec

from kernelgraph.errors import KernelgraphError

Purpose = Literal["plan", "implement", "fix", "inputs"]

PROVIDERS_GROUP = "kernelgraph.providers"

CONTEXT_KEYS: dict[str, tuple[str, ...]] = {
    # every purpose: task_path (a local path to the trusted task file), task_name, target,
    # chip (dict of the chip's figures), iteration, seed
    "plan": ("parent", "failures", "hint", "knowledge", "baseline_s", "feedback"),
    "implement": ("plan", "parent", "failures", "knowledge", "feedback"),
    "fix": ("code", "diagnostics", "history", "round", "api_lookup"),
    "inputs": ("reference_source", "signature"),
}
"""Beyond the common keys. `parent` is None or {code, plan, profile, config, speedup};
`failures` is a list of {iteration, phase, error}; `history` (fixer) is a list of
{round, error, cause, fix}; `profile` is `tools.api.Profile` as builtins."""

PLAN_SECTIONS: tuple[str, ...] = (
    "Analysis",
    "Strategy",
    "Memory layout and tiling",
    "TPU levers",
    "Grid and BlockSpecs",
    "Expected effect",
)
"""Every plan is markdown with these `## ` sections, in this order."""

NO_GAIN_MARKER = "Conclusion: no kernel will pay off"
"""A plan containing this line (with its evidence in Analysis) ends the trajectory as a
recorded result, not a failure."""


class LlmRequest(msgspec.Struct, frozen=True, kw_only=True):
    agent: str
    purpose: Purpose
    prompt: str
    context: dict[str, Any] = {}
    seed: int = 0
    attempt: int = 0
    """0 for the first ask; 1 for the single re-ask after a malformed answer."""


class LlmResponse(msgspec.Struct, frozen=True, kw_only=True):
    text: str
    model: str
    tokens_in: int = 0
    tokens_out: int = 0
    latency_ms: float = 0.0
    seed: int | None = None
    """The seed the provider drew this answer with (None: it takes none)."""
    temperature: float | None = None
    """The sampling temperature it used (None: the model's default, or no sampling)."""


class ProviderError(KernelgraphError):
    """The provider cannot answer at all (no key, a rejected key, no such model): fail now."""


class UnknownProvider(ProviderError):
    pass


class Provider(abc.ABC):
    """An LLM (or a stand-in for one). See the module docstring for the call order."""

    name: ClassVar[str]

    @abc.abstractmethod
    async def complete(self, request: LlmRequest) -> LlmResponse:
        """Answer one request. Raise `ProviderError` when no retry can help."""

    async def aclose(self) -> None:  # noqa: B027 (optional hook; most providers hold nothing)
        """Release clients and connections."""

    def describe(self) -> str:
        return self.name


_BUILTIN: dict[str, str] = {
    "offline": "agents.llm.offline:OfflineProvider",
    "gemini": "agents.llm.gemini:GeminiProvider",
    "replay": "agents.llm.replay:ReplayProvider",
}


def _load(spec: str) -> type[Provider]:
    module_name, _, attr = spec.partition(":")
    module = importlib.import_module(module_name)
    cls = getattr(module, attr)
    if not (isinstance(cls, type) and issubclass(cls, Provider)):
        raise ProviderError(f"{spec} is not a Provider subclass")
    return cls


def provider_names() -> list[str]:
    plugins = {ep.name for ep in importlib.metadata.entry_points(group=PROVIDERS_GROUP)}
    return sorted({*_BUILTIN, *plugins})


def provider_class(name: str) -> type[Provider]:
    """A built-in, an entry point of the `kernelgraph.providers` group, or `module:Class`."""
    if name in _BUILTIN:
        return _load(_BUILTIN[name])
    if ":" in name:
        try:
            return _load(name)
        except (ImportError, AttributeError) as exc:
            raise UnknownProvider(f"provider {name!r} cannot be loaded: {exc}") from None
    for ep in importlib.metadata.entry_points(group=PROVIDERS_GROUP):
        if ep.name == name:
            return _load(ep.value)
    raise UnknownProvider(f"unknown provider {name!r}; known: {', '.join(provider_names())}")


def get_provider(name: str, **options: Any) -> Provider:
    """Build the provider `name` (built-in or from the `kernelgraph.providers` group)."""
    return provider_class(name)(**options)
