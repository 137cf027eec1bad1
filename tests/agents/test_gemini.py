"""GeminiProvider through the real google-genai client against a scripted server on loopback.

Nothing here reaches the network: every request goes to `FakeGemini` on 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from agents.llm.base import LlmRequest, ProviderError, get_provider
from agents.llm.gemini import GeminiProvider
from agents.llm.parsing import MalformedAnswer, extract_code

MODEL = "gemini-test-model"
KEY = "test-key-0123456789"

ANSWER = "Here is the kernel.\n\n```python\ndef build():\n    return None\n```\n"


def ok_body(text: str = ANSWER, *, model_version: str = "gemini-test-model-001") -> dict[str, Any]:
    return {
        "candidates": [{"content": {"role": "model", "parts": [{"text": text}]},
                        "finishReason": "STOP"}],
        "usageMetadata": {"promptTokenCount": 11, "candidatesTokenCount": 7,
                          "thoughtsTokenCount": 5, "totalTokenCount": 23},
        "modelVersion": model_version,
    }


def error_body(code: int, status: str, message: str, details: list[Any] | None = None) -> dict[str, Any]:
    return {"error": {"code": code, "status": status, "message": message, "details": details or []}}


class FakeGemini:
    """A threaded HTTP server that answers from a script and records every request."""

    def __init__(self) -> None:
        self.script: list[tuple[int, dict[str, Any], dict[str, str]]] = []
        self.requests: list[dict[str, Any]] = []
        self.delay_s = 0.0
        self.in_flight = 0
        self.max_in_flight = 0
        self._lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                with fake._lock:
                    fake.requests.append({"path": self.path, "headers": dict(self.headers),
                                          "body": json.loads(body), "t": time.monotonic()})
                    status, payload, headers = (fake.script.pop(0) if fake.script
                                                else (200, ok_body(), {}))
                    fake.in_flight += 1
                    fake.max_in_flight = max(fake.max_in_flight, fake.in_flight)
                done = False
                try:
                    time.sleep(fake.delay_s)
                    data = json.dumps(payload).encode()
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    for name, value in headers.items():
                        self.send_header(name, value)
                    self.end_headers()
                    # Out of flight before the body goes: a client that has the whole answer
                    # may send its next request before this thread runs again.
                    with fake._lock:
                        fake.in_flight -= 1
                    done = True
                    self.wfile.write(data)
                finally:
                    if not done:
                        with fake._lock:
                            fake.in_flight -= 1

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, args=(0.05,),
                                        daemon=True)

    def __enter__(self) -> FakeGemini:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeGemini]:
    for name in ("GEMINI_API_KEY", "GOOGLE_API_KEY", "KG_GEMINI_MODEL", "KG_GEMINI_TEMPERATURE",
                 "KG_GEMINI_THINKING_BUDGET", "KG_GEMINI_BASE_URL", "KG_LLM_CONCURRENCY",
                 "GOOGLE_GENAI_USE_VERTEXAI", "HTTP_PROXY", "HTTPS_PROXY", "http_proxy",
                 "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    with FakeGemini() as fake:
        yield fake


def provider(server: FakeGemini, **options: Any) -> GeminiProvider:
    options = {"model": MODEL, "api_key": KEY, "base_url": server.url, "retry_base_s": 0.01,
               **options}
    return GeminiProvider(**options)


def request(prompt: str = "Write the kernel.", **fields: Any) -> LlmRequest:
    return LlmRequest(agent="implementer", purpose="implement", prompt=prompt, **fields)


async def test_answer_and_request_body(server: FakeGemini) -> None:
    gemini = provider(server, temperature=0.3, thinking_budget=256)
    try:
        response = await gemini.complete(request("Write an RMSNorm kernel.", seed=42))
    finally:
        await gemini.aclose()
    assert response.text == ANSWER
    assert response.model == "gemini-test-model-001"
    assert (response.tokens_in, response.tokens_out) == (11, 12)
    assert response.latency_ms > 0
    # recorded on the expansion's LlmCalled event: what this answer was drawn with
    assert response.seed == 42 and response.temperature == pytest.approx(0.3)
    (sent,) = server.requests
    assert sent["path"].endswith(f"/models/{MODEL}:generateContent")
    assert sent["headers"]["x-goog-api-key"] == KEY
    body = sent["body"]
    assert body["contents"] == [{"role": "user", "parts": [{"text": "Write an RMSNorm kernel."}]}]
    config = body["generationConfig"]
    assert config["temperature"] == pytest.approx(0.3)
    assert config["seed"] == 42
    # The SDK's converter writes the field in snake case; the API reads either spelling.
    assert config["thinkingConfig"] in ({"thinkingBudget": 256}, {"thinking_budget": 256})


async def test_settings_from_environment(server: FakeGemini, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KG_GEMINI_MODEL", "gemini-from-env")
    monkeypatch.setenv("GOOGLE_API_KEY", KEY)
    monkeypatch.setenv("KG_GEMINI_BASE_URL", server.url)
    monkeypatch.setenv("KG_GEMINI_TEMPERATURE", "0.5")
    gemini = get_provider("gemini")
    try:
        assert isinstance(gemini, GeminiProvider)
        assert gemini.describe() == "gemini:gemini-from-env"
        await gemini.complete(request())
    finally:
        await gemini.aclose()
    (sent,) = server.requests
    assert sent["path"].endswith("/models/gemini-from-env:generateContent")
    assert sent["body"]["generationConfig"]["temperature"] == pytest.approx(0.5)
    assert "thinkingConfig" not in sent["body"]["generationConfig"]


async def test_429_waits_for_the_retry_hint(server: FakeGemini) -> None:
    hint = {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "0.4s"}
    server.script.append((429, error_body(429, "RESOURCE_EXHAUSTED", "quota", [hint]), {}))
    gemini = provider(server)
    try:
        response = await gemini.complete(request())
    finally:
        await gemini.aclose()
    assert response.text == ANSWER
    first, second = server.requests
    assert 0.4 <= second["t"] - first["t"] < 3.0


async def test_429_retry_after_header(server: FakeGemini) -> None:
    server.script.append((429, error_body(429, "RESOURCE_EXHAUSTED", "slow down"),
                          {"Retry-After": "1"}))
    gemini = provider(server)
    try:
        await gemini.complete(request())
    finally:
        await gemini.aclose()
    first, second = server.requests
    waited = second["t"] - first["t"]
    assert waited >= 1.0 and waited < 4.0


async def test_500_then_success(server: FakeGemini) -> None:
    server.script += [(500, error_body(500, "INTERNAL", "boom"), {}),
                      (503, error_body(503, "UNAVAILABLE", "busy"), {})]
    gemini = provider(server)
    try:
        response = await gemini.complete(request())
    finally:
        await gemini.aclose()
    assert response.text == ANSWER
    assert len(server.requests) == 3


async def test_retries_exhausted(server: FakeGemini) -> None:
    server.script += [(500, error_body(500, "INTERNAL", "boom"), {})] * 3
    gemini = provider(server, max_retries=2)
    try:
        with pytest.raises(ProviderError, match="after 2 retries: 500 INTERNAL"):
            await gemini.complete(request())
    finally:
        await gemini.aclose()
    assert len(server.requests) == 3


async def test_other_4xx_is_not_retried(server: FakeGemini) -> None:
    server.script.append((400, error_body(400, "INVALID_ARGUMENT", "bad seed"), {}))
    gemini = provider(server)
    try:
        with pytest.raises(ProviderError, match="400 INVALID_ARGUMENT"):
            await gemini.complete(request())
    finally:
        await gemini.aclose()
    assert len(server.requests) == 1


def test_missing_key(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("GEMINI_API_KEY", "GOOGLE_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ProviderError) as info:
        GeminiProvider(model=MODEL)
    message = str(info.value)
    assert "\n" not in message
    assert "GEMINI_API_KEY" in message


def test_missing_model(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KG_GEMINI_MODEL", raising=False)
    with pytest.raises(ProviderError, match="pass --model or set KG_GEMINI_MODEL") as info:
        GeminiProvider(api_key=KEY)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(("status", "body"), [
    (403, error_body(403, "PERMISSION_DENIED", f"Method doesn't allow key {KEY}")),
    (400, error_body(400, "INVALID_ARGUMENT", "API key not valid. Please pass a valid API key.",
                     [{"@type": "type.googleapis.com/google.rpc.ErrorInfo",
                       "reason": "API_KEY_INVALID"}])),
])
async def test_rejected_key(server: FakeGemini, status: int, body: dict[str, Any]) -> None:
    server.script.append((status, body, {}))
    gemini = provider(server)
    try:
        with pytest.raises(ProviderError, match="rejected the API key") as info:
            await gemini.complete(request())
    finally:
        await gemini.aclose()
    message = str(info.value)
    assert "\n" not in message
    assert KEY not in message
    assert len(server.requests) == 1


async def test_malformed_answer_is_returned_as_is(server: FakeGemini) -> None:
    prose = "I would tile the rows by 256 and keep the sum in f32."
    server.script.append((200, ok_body(prose), {}))
    gemini = provider(server)
    try:
        response = await gemini.complete(request())
    finally:
        await gemini.aclose()
    assert response.text == prose
    with pytest.raises(MalformedAnswer, match="no ```python code block"):
        extract_code(response.text)


async def test_concurrency_is_shared_across_providers(server: FakeGemini) -> None:
    server.delay_s = 0.05
    first, second = provider(server, max_concurrency=2), provider(server, max_concurrency=2)
    try:
        await asyncio.gather(*(p.complete(request(f"ask {i}"))
                               for i in range(4) for p in (first, second)))
    finally:
        await first.aclose()
        await second.aclose()
    assert len(server.requests) == 8
    assert server.max_in_flight == 2


async def test_unreachable_server_is_retried_then_reported(server: FakeGemini) -> None:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed_port = sock.getsockname()[1]
    gemini = GeminiProvider(model=MODEL, api_key=KEY, base_url=f"http://127.0.0.1:{closed_port}",
                            max_retries=1, retry_base_s=0.01)
    try:
        with pytest.raises(ProviderError, match="still failing after 1 retries") as info:
            await gemini.complete(request())
    finally:
        await gemini.aclose()
    assert "\n" not in str(info.value) and KEY not in str(info.value)
