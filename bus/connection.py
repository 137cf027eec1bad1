"""Connecting to NATS, with credentials from the environment only.

Secrets never go on a command line (other users can read it in `ps`): a URL with
`user:password@` is refused, and the token, user/password or creds file come from
KG_NATS_TOKEN, KG_NATS_USER + KG_NATS_PASSWORD, or KG_NATS_CREDS.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import nats
from nats.aio.client import Client as NATS

from kernelgraph.errors import KernelgraphError

log = logging.getLogger("kernelgraph.bus")

URL_ENV = "KG_NATS_URL"
TOKEN_ENV = "KG_NATS_TOKEN"
USER_ENV = "KG_NATS_USER"
PASSWORD_ENV = "KG_NATS_PASSWORD"
CREDS_ENV = "KG_NATS_CREDS"


class BusConfigError(KernelgraphError, ValueError):
    """A NATS URL or credential setting that cannot work; the message says which and why."""


class BusUnreachable(BusConfigError):
    """No server answered at the URL within the wait."""


@dataclass(frozen=True)
class Credentials:
    token: str | None = None
    user: str | None = None
    password: str | None = None
    creds_file: str | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Credentials:
        env = os.environ if env is None else env
        user, password = env.get(USER_ENV) or None, env.get(PASSWORD_ENV) or None
        if (user is None) != (password is None):
            raise BusConfigError(f"set both {USER_ENV} and {PASSWORD_ENV}, or neither")
        creds = env.get(CREDS_ENV) or None
        if creds is not None and not os.path.isfile(creds):
            raise BusConfigError(f"{CREDS_ENV}={creds}: no such file")
        return cls(token=env.get(TOKEN_ENV) or None, user=user, password=password, creds_file=creds)

    def connect_options(self) -> dict[str, Any]:
        options: dict[str, Any] = {}
        if self.token:
            options["token"] = self.token
        if self.user:
            options["user"], options["password"] = self.user, self.password
        if self.creds_file:
            options["user_credentials"] = self.creds_file
        return options


def check_url(url: str) -> str:
    """Refuse URLs that cannot be NATS or that carry a secret."""
    for part in url.split(","):
        parts = urlsplit(part.strip())
        if parts.scheme not in ("nats", "tls", "ws", "wss"):
            raise BusConfigError(f"--nats {url}: expected nats://host:port (got scheme {parts.scheme!r})")
        if parts.username or parts.password:
            raise BusConfigError(
                f"--nats: credentials in the URL are refused; set {TOKEN_ENV} or "
                f"{USER_ENV}/{PASSWORD_ENV} in the environment instead"
            )
        if not parts.hostname:
            raise BusConfigError(f"--nats {url}: no host")
    return url


async def connect(
    url: str,
    *,
    name: str,
    credentials: Credentials | None = None,
    connect_timeout: float = 5.0,
    wait_s: float | None = 10.0,
) -> NATS:
    """A client that reconnects forever: a restarting server must not kill the services.

    The first connection is different: if nothing listens at the URL for `wait_s` seconds
    (None: wait forever), `BusUnreachable` says so instead of retrying silently.
    """
    check_url(url)
    creds = Credentials.from_env() if credentials is None else credentials
    servers = [u.strip() for u in url.split(",")]
    if wait_s is not None:
        await _wait_until_reachable(url, servers, wait_s)

    client: list[NATS] = []

    def closing() -> bool:
        return bool(client) and (client[0].is_closed or client[0].is_draining)

    async def on_error(exc: Exception) -> None:
        if not closing():
            log.warning("nats %s: %s", name, exc)

    async def on_disconnected() -> None:
        if not closing():
            log.warning("nats %s: disconnected; reconnecting", name)

    async def on_reconnected() -> None:
        log.info("nats %s: reconnected", name)

    nc = await nats.connect(
        servers=servers,
        name=name,
        connect_timeout=connect_timeout,
        max_reconnect_attempts=-1,
        reconnect_time_wait=0.5,
        allow_reconnect=True,
        error_cb=on_error,
        disconnected_cb=on_disconnected,
        reconnected_cb=on_reconnected,
        **creds.connect_options(),
    )
    client.append(nc)
    return nc


async def _wait_until_reachable(url: str, servers: list[str], wait_s: float) -> None:
    deadline = time.monotonic() + wait_s
    while True:
        for server in servers:
            parts = urlsplit(server if "://" in server else f"nats://{server}")
            try:
                _, writer = await asyncio.wait_for(
                    asyncio.open_connection(parts.hostname, parts.port or 4222), timeout=1.0)
            except (OSError, TimeoutError):
                continue
            writer.close()
            return
        if time.monotonic() >= deadline:
            raise BusUnreachable(f"no NATS server answers at {url} (waited {wait_s:g} s)")
        await asyncio.sleep(0.2)
