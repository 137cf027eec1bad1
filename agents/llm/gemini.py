"""`GeminiProvider`: Google's Gemini models through the google-genai SDK, asynchronously.

Every setting can come from a keyword or from the environment (keywords win):

| keyword           | environment                                   | default        |
| ----------------- | --------------------------------------------- | -------------- |
| `model`           | `KG_GEMINI_MODEL`                             | none: required |
| `temperature`     | `KG_GEMINI_TEMPERATURE`                       | the model's    |
| `thinking_budget` | `KG_GEMINI_THINKING_BUDGET`                   | the model's    |
| `api_key`         | `GEMINI_API_KEY`, then `GOOGLE_API_KEY`       | none: required |
| `base_url`        | `KG_GEMINI_BASE_URL` (a proxy, a test server) | Google's       |
| `max_concurrency` | `KG_LLM_CONCURRENCY`                          | 4              |
| `max_retries`     | -                                             | 5              |

The model is never guessed: which model a search uses is part of its result. Calls that
hit a rate limit (429) or a server error (5xx), or that lose their connection, are
retried with exponential backoff and jitter, waiting at least as long as the server asks
(`RetryInfo.retryDelay` in the error body, or a `Retry-After` header). Anything else the
API refuses is a `ProviderError` with a one-line message that never contains the key.

All providers built in one process share one concurrency limit per event loop, so the
trajectories of a search together never have more than `max_concurrency` calls in flight
(the first provider built on a loop sets the limit).
"""

from __future__ import annotations

import asyncio
import email.utils
import os
import random
import re
import time
import weakref
from typing import Any, ClassVar

import msgspec

from agents.llm.base import LlmRequest, LlmResponse, Provider, ProviderError

ENV_MODEL = "KG_GEMINI_MODEL"
ENV_TEMPERATURE = "KG_GEMINI_TEMPERATURE"
ENV_THINKING_BUDGET = "KG_GEMINI_THINKING_BUDGET"
ENV_API_KEYS = ("GEMINI_API_KEY", "GOOGLE_API_KEY")
ENV_BASE_URL = "KG_GEMINI_BASE_URL"
ENV_CONCURRENCY = "KG_LLM_CONCURRENCY"

DEFAULT_CONCURRENCY = 4
DEFAULT_MAX_RETRIES = 5
DEFAULT_TIMEOUT_S = 600.0
RETRY_BASE_S = 1.0
"""The first backoff step; each retry doubles it (then jitter), up to `RETRY_MAX_WAIT_S`."""
RETRY_MAX_WAIT_S = 120.0
"""No single wait is longer, whatever the server asks."""

_SEED_MODULUS = 2**31
"""The API takes a signed 32-bit seed."""

_semaphores: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = (
    weakref.WeakKeyDictionary()
)


def shared_semaphore(limit: int) -> asyncio.Semaphore:
    """The process's one limit on calls in flight for the running loop (created on first use)."""
    loop = asyncio.get_running_loop()
    semaphore = _semaphores.get(loop)
    if semaphore is None:
        semaphore = _semaphores[loop] = asyncio.Semaphore(limit)
    return semaphore


def _env_number(name: str, value: Any, kind: type[int] | type[float]) -> Any:
    """A keyword, else the environment variable `name`, as `kind`; None when neither is set."""
    if value is None:
        raw = os.environ.get(name, "").strip()
        if not raw:
            return None
        value = raw
    try:
        return kind(value)
    except (TypeError, ValueError):
        raise ProviderError(f"{name}: expected {kind.__name__}, got {value!r}") from None


def _duration_s(text: Any) -> float | None:
    """A protobuf Duration as JSON ("31s", "0.250s") in seconds."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d*)?)s\s*", str(text))
    return float(match.group(1)) if match else None


def retry_hint_s(exc: BaseException) -> float | None:
    """How long the server asked us to wait: `RetryInfo.retryDelay`, else `Retry-After`."""
    details = getattr(exc, "details", None)
    error = details.get("error", details) if isinstance(details, dict) else None
    if isinstance(error, dict):
        for item in error.get("details") or ():
            if isinstance(item, dict) and str(item.get("@type", "")).endswith("RetryInfo"):
                delay = _duration_s(item.get("retryDelay", ""))
                if delay is not None:
                    return delay
    headers = getattr(getattr(exc, "response", None), "headers", None)
    raw = headers.get("Retry-After") if headers is not None else None
    if raw:
        try:
            return max(0.0, float(raw))
        except ValueError:
            when = email.utils.parsedate_to_datetime(raw) if raw.strip() else None
            if when is not None:
                return max(0.0, when.timestamp() - time.time())
    return None


def _transport_errors() -> tuple[type[BaseException], ...]:
    """Connection failures of whichever HTTP stack the SDK uses (aiohttp when installed)."""
    errors: list[type[BaseException]] = [TimeoutError, ConnectionError]
    try:
        import httpx

        errors.append(httpx.TransportError)
    except ImportError:
        pass
    try:
        import aiohttp

        errors.append(aiohttp.ClientError)
    except ImportError:
        pass
    return tuple(errors)


def _is_key_error(exc: Any) -> bool:
    """401/403, or the 400 the Gemini API sends for a key it does not know."""
    if exc.code in (401, 403):
        return True
    text = f"{exc.message or ''} {exc.details!s}"
    return exc.code == 400 and ("API_KEY_INVALID" in text or "API key not valid" in text)


class GeminiProvider(Provider):
    """Gemini through `google.genai`; see the module docstring for settings and retries."""

    name: ClassVar[str] = "gemini"

    def __init__(
        self,
        *,
        model: str | None = None,
        temperature: float | None = None,
        thinking_budget: int | None = None,
        api_key: str | None = None,
        base_url: str | None = None,
        max_concurrency: int | None = None,
        max_retries: int | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        retry_base_s: float = RETRY_BASE_S,
        retry_max_wait_s: float = RETRY_MAX_WAIT_S,
        **_: Any,
    ) -> None:
        self.model = (model or os.environ.get(ENV_MODEL, "")).strip()
        if not self.model:
            raise ProviderError(f"no Gemini model configured: pass --model or set {ENV_MODEL}")
        key = api_key or next((os.environ[n] for n in ENV_API_KEYS if os.environ.get(n)), "")
        self._key = key.strip()
        if not self._key:
            raise ProviderError(f"no Gemini API key: set {ENV_API_KEYS[0]} (or {ENV_API_KEYS[1]})")
        self.temperature: float | None = _env_number(ENV_TEMPERATURE, temperature, float)
        self.thinking_budget: int | None = _env_number(ENV_THINKING_BUDGET, thinking_budget, int)
        self.base_url = (base_url or os.environ.get(ENV_BASE_URL, "")).strip() or None
        concurrency = _env_number(ENV_CONCURRENCY, max_concurrency, int)
        self.max_concurrency = max(1, concurrency or DEFAULT_CONCURRENCY)
        self.max_retries = max(0, DEFAULT_MAX_RETRIES if max_retries is None else int(max_retries))
        self.retry_base_s = retry_base_s
        self.retry_max_wait_s = retry_max_wait_s

        from google import genai
        from google.genai import types

        self._types = types
        # The SDK's own retries are switched off (one attempt): this class owns retrying,
        # so it can honour the server's hint and report exhaustion in one line.
        http_options = types.HttpOptions(
            base_url=self.base_url,
            timeout=int(timeout_s * 1000),
            retry_options=types.HttpRetryOptions(attempts=1),
        )
        try:
            self._client = genai.Client(api_key=self._key, vertexai=False, http_options=http_options)
        except Exception as exc:  # the SDK validates options eagerly
            raise ProviderError(f"cannot build the Gemini client: {self._clean(exc)}") from None

    def describe(self) -> str:
        return f"gemini:{self.model}"

    def _config(self, request: LlmRequest) -> Any:
        types = self._types
        thinking = (None if self.thinking_budget is None
                    else types.ThinkingConfig(thinking_budget=self.thinking_budget))
        return types.GenerateContentConfig(
            temperature=self.temperature,
            thinking_config=thinking,
            seed=request.seed % _SEED_MODULUS,
        )

    def _clean(self, exc: BaseException | str) -> str:
        """One line, without the key."""
        text = " ".join(str(exc).split()) or type(exc).__name__
        if self._key:
            text = text.replace(self._key, "***")
        return text[:300]

    def _backoff_s(self, retry: int, hint: float | None) -> float:
        wait = self.retry_base_s * 2**retry * (1.0 + random.random())
        if hint is not None:
            wait = hint + random.uniform(0.0, min(1.0, 0.1 * hint + 0.05))
        return min(wait, self.retry_max_wait_s)

    def _error(self, exc: Any) -> ProviderError:
        where = f"model {self.model!r}"
        summary = self._clean(exc.message or exc.status or "")
        if _is_key_error(exc):
            status = f"{exc.code} {exc.status or ''}".rstrip()
            return ProviderError(f"Gemini rejected the API key ({status}): check "
                                 f"{ENV_API_KEYS[0]} (or {ENV_API_KEYS[1]})")
        if exc.code == 404:
            return ProviderError(f"Gemini has no {where} (404): {summary}")
        return ProviderError(f"Gemini refused the request for {where} ({exc.code} "
                             f"{exc.status or ''}): {summary}")

    async def complete(self, request: LlmRequest) -> LlmResponse:
        from google.genai import errors

        transport_errors = _transport_errors()
        config = self._config(request)
        semaphore = shared_semaphore(self.max_concurrency)
        retry = 0
        while True:
            failure: str
            hint: float | None = None
            async with semaphore:
                start = time.perf_counter()
                try:
                    response = await self._client.aio.models.generate_content(
                        model=self.model, contents=request.prompt, config=config)
                except errors.APIError as exc:
                    if exc.code != 429 and not 500 <= (exc.code or 0) < 600:
                        raise self._error(exc) from None
                    failure = f"{exc.code} {exc.status or ''}".rstrip()
                    hint = retry_hint_s(exc)
                except transport_errors as exc:
                    failure = self._clean(exc)
                else:
                    latency_ms = (time.perf_counter() - start) * 1000.0
                    answer = self._answer(response, latency_ms)
                    # what this expansion drew with, recorded on its LlmCalled event
                    return msgspec.structs.replace(answer, seed=request.seed % _SEED_MODULUS,
                                                   temperature=self.temperature)
            if retry >= self.max_retries:
                raise ProviderError(f"Gemini ({self.model}) still failing after "
                                    f"{self.max_retries} retries: {failure}")
            await asyncio.sleep(self._backoff_s(retry, hint))
            retry += 1

    def _answer(self, response: Any, latency_ms: float) -> LlmResponse:
        candidates = response.candidates or []
        if not candidates:
            feedback = response.prompt_feedback
            reason = getattr(feedback, "block_reason", None) if feedback else None
            if reason:
                raise ProviderError(f"Gemini blocked the prompt ({reason})")
        parts = []
        if candidates and candidates[0].content and candidates[0].content.parts:
            parts = [p.text for p in candidates[0].content.parts if p.text and not p.thought]
        usage = response.usage_metadata
        tokens_in = (usage.prompt_token_count or 0) if usage else 0
        tokens_out = ((usage.candidates_token_count or 0) + (usage.thoughts_token_count or 0)
                      if usage else 0)
        return LlmResponse(
            text="".join(parts),
            model=response.model_version or self.model,
            tokens_in=tokens_in,
            tokens_out=tokens_out,
            latency_ms=latency_ms,
        )

    async def aclose(self) -> None:
        await self._client.aio.aclose()
