"""The installation's receipt key: Ed25519, kept outside the log, created on first use.

An unkeyed hash only shows that a receipt was not damaged; anyone who edits one can
recompute it. A signature by a key that never leaves this installation shows who sealed it.
The private key lives at ``$KG_RECEIPT_KEY`` or ``~/.config/kernelgraph/receipt-key`` (PKCS#8
PEM, mode 0600, its directory 0700), never in receipts, logs or a sandbox's environment; a
receipt carries the public key, and a key is named by its fingerprint (sha256 of the raw
public key, the first 32 hex digits).
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from kernelgraph.errors import KernelgraphError

KEY_ENV = "KG_RECEIPT_KEY"
ALGORITHM = "ed25519"


class SigningError(KernelgraphError, ValueError):
    """The receipt key cannot be read or created (wrong type, unsafe permissions)."""


def key_path() -> Path:
    """Where this installation's private key is kept."""
    configured = os.environ.get(KEY_ENV)
    if configured:
        return Path(configured).expanduser()
    return Path.home() / ".config" / "kernelgraph" / "receipt-key"


def fingerprint(public_raw: bytes) -> str:
    return hashlib.sha256(public_raw).hexdigest()[:32]


@dataclass(frozen=True)
class ReceiptKey:
    private: Ed25519PrivateKey

    @property
    def public_raw(self) -> bytes:
        return self.private.public_key().public_bytes(serialization.Encoding.Raw,
                                                      serialization.PublicFormat.Raw)

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.public_raw)

    def sign(self, message: bytes) -> dict[str, str]:
        """The ``signature`` object of a receipt over ``message``."""
        return {"algorithm": ALGORITHM,
                "public_key": base64.b64encode(self.public_raw).decode(),
                "key_fingerprint": self.fingerprint,
                "value": base64.b64encode(self.private.sign(message)).decode()}


def load_key(path: Path | None = None, *, create: bool = True) -> ReceiptKey:
    """This installation's key, created (0600) when it does not exist and ``create``."""
    path = path or key_path()
    try:
        return _read(path)
    except FileNotFoundError:
        if not create:
            raise SigningError(f"no receipt key at {path}") from None
    _create(path)
    return _read(path)


def public_key_of(signature: dict[str, object]) -> bytes:
    raw = base64.b64decode(str(signature.get("public_key", "")), validate=True)
    if len(raw) != 32:
        raise SigningError("the public key is not a 32-byte Ed25519 key")
    return raw


def signature_valid(signature: dict[str, object], message: bytes) -> bool:
    """Whether ``signature`` (a receipt's object) is the Ed25519 signature of ``message``
    by the public key it names (the key is judged separately, by its fingerprint)."""
    if signature.get("algorithm") != ALGORITHM:
        return False
    try:
        public = Ed25519PublicKey.from_public_bytes(public_key_of(signature))
        public.verify(base64.b64decode(str(signature.get("value", "")), validate=True), message)
    except (InvalidSignature, SigningError, ValueError):
        return False
    return True


def _read(path: Path) -> ReceiptKey:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(f.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise SigningError(f"{path}: the receipt key is not a regular file")
        if info.st_mode & 0o077:
            raise SigningError(f"{path}: the receipt key is readable by others "
                               f"(mode {stat.S_IMODE(info.st_mode):o}; chmod 600 it)")
        data = f.read(1 << 16)
    try:
        private = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError) as exc:
        raise SigningError(f"{path}: not a PEM private key ({exc})") from None
    if not isinstance(private, Ed25519PrivateKey):
        raise SigningError(f"{path}: the receipt key must be an Ed25519 key")
    return ReceiptKey(private)


def _create(path: Path) -> None:
    """Write a new key atomically (link from a private temporary file): concurrent first
    uses (tune workers) all end up with the one key that was linked first."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    pem = Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption())
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(pem)
            f.flush()
            os.fsync(f.fileno())
        with contextlib.suppress(FileExistsError):
            os.link(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)
