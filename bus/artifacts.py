"""Artifacts on the bus: large texts travel once, by sha256, on `kg.art.<sha256>`.

A producer publishes each artifact (bytes, with its kind in the `Kg-Artifact-Kind` header
and `Nats-Msg-Id = sha256`) and waits for JetStream's ack *before* publishing any event
that names the hash. The recorder copies artifacts into the log before it commits the
events of the same batch (see `bus.recorder`), so the log never holds an event whose
artifact is missing. Agents in other processes read an artifact back from the KG_ART
stream by hash (one message per subject, kept `artifacts_max_age_s`).
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Iterable

from nats.js import JetStreamContext
from nats.js.errors import NotFoundError

from bus import subjects
from bus.server import DEFAULT_MAX_PAYLOAD
from kernelgraph.errors import KernelgraphError


class ArtifactTooLarge(KernelgraphError, ValueError):
    """An artifact above the server's max_payload cannot travel as one message."""


class ArtifactNotFound(KernelgraphError, KeyError):
    """No artifact with that hash on the bus (never published, or older than the stream keeps)."""


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


async def publish_artifacts(
    js: JetStreamContext, items: Iterable[tuple[bytes, str]], *, max_payload: int = DEFAULT_MAX_PAYLOAD
) -> list[str]:
    """Publish (data, kind) pairs, wait until JetStream has stored all, return their hashes.

    `max_payload` is the server's limit (the connection's `max_payload`); larger artifacts are
    refused here with a message that says so, not by the server with a bare error.
    """
    hashes: list[str] = []
    pending: list[asyncio.Future[object]] = []
    seen: set[str] = set()
    for data, kind in items:
        sha = sha256_hex(data)
        hashes.append(sha)
        if sha in seen:
            continue
        seen.add(sha)
        if len(data) > max_payload - 1024:
            raise ArtifactTooLarge(
                f"artifact {sha[:12]} ({kind}) is {len(data)} bytes; the NATS server accepts "
                f"messages up to {max_payload} bytes (raise max_payload on the server)"
            )
        headers = {subjects.MSG_ID_HEADER: sha, subjects.ARTIFACT_KIND_HEADER: kind}
        pending.append(await js.publish_async(subjects.artifact_subject(sha), data, headers=headers))
    if pending:
        await asyncio.gather(*pending)
    return hashes


async def fetch_artifact(js: JetStreamContext, sha256: str) -> tuple[bytes, str]:
    """(data, kind) of one artifact, checked against its hash."""
    try:
        msg = await js.get_last_msg(
            subjects.ARTIFACTS_STREAM, subjects.artifact_subject(sha256), direct=True
        )
    except NotFoundError:
        raise ArtifactNotFound(f"no artifact {sha256} on the bus") from None
    data = msg.data or b""
    if sha256_hex(data) != sha256:
        raise ArtifactNotFound(f"artifact {sha256} on the bus does not match its hash")
    kind = (msg.headers or {}).get(subjects.ARTIFACT_KIND_HEADER, "")
    return data, kind
