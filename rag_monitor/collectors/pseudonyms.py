"""Keyed pseudonyms for identifiers that carry PII (a ``session.id`` that is an e-mail address).

    key = load_pseudonym_key(settings.pseudonym_key, settings.data_dir)
    pseudonym = Pseudonyms(key)
    pseudonym("jane@example.com")   # 'pii-...' (24 letters and digits 2-7): the same for the same input

HMAC-SHA256 under a secret key: the same identifier always maps to the same pseudonym, so
records, citations, review items and feedback still join, but without the key nobody can test
a guess ("is it jane@example.com?") against a pseudonym. Replicas that share a store must share
the key (set ``pseudonym_key``); without one the agent generates a random key and keeps it in
``<data_dir>/pseudonym.key``. Changing the key changes every pseudonym from then on.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import secrets
from pathlib import Path

__all__ = ["KEY_FILE", "PSEUDONYM_PREFIX", "Pseudonyms", "load_pseudonym_key"]

KEY_FILE = "pseudonym.key"
PSEUDONYM_PREFIX = "pii-"
# base32 (a-z, 2-7): no long digit runs, so a pseudonym never looks like a card or a phone number.
_DIGEST_BYTES = 15  # 120 bits -> 24 characters


class Pseudonyms:
    def __init__(self, key: bytes):
        if not key:
            raise ValueError("the pseudonym key must not be empty")
        self._key = key

    def __call__(self, value: str) -> str:
        digest = hmac.new(self._key, value.encode("utf-8", "surrogatepass"), hashlib.sha256).digest()
        return PSEUDONYM_PREFIX + base64.b32encode(digest[:_DIGEST_BYTES]).decode("ascii").lower()


def load_pseudonym_key(configured: str, data_dir: str | os.PathLike) -> bytes:
    """The configured key, else the one kept in ``data_dir`` (created, random, on first use)."""
    if configured:
        return configured.encode("utf-8")
    path = Path(data_dir) / KEY_FILE
    try:
        # O_EXCL: two agents starting on one data directory agree on the first key written.
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        key = path.read_text(encoding="ascii").strip()
        if not key:
            raise ValueError(f"{path} is empty: delete it to generate a new pseudonym key, or set pseudonym_key") from None
        return key.encode("ascii")
    key = secrets.token_hex(32)
    with os.fdopen(fd, "w", encoding="ascii") as fh:
        fh.write(key + "\n")
    return key.encode("ascii")
