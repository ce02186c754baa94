"""The CDN's media encryption: AES-128-ECB with PKCS7 padding, one fresh key per file.

Inbound keys come in three shapes: ``image_item.aeskey`` as 32 hex characters, or
``media.aes_key`` base64 of either the 16 raw bytes or of those 32 hex characters.
Outbound, the key goes to ``getuploadurl`` as hex and into the message as base64 of
the hex.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os

from cryptography.hazmat.primitives import padding
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

BLOCK = 16


def ciphertext_size(n: int) -> int:
    """The size of ``n`` bytes once padded and encrypted: PKCS7 always adds a block part."""
    return (n // BLOCK + 1) * BLOCK


def new_key() -> bytes:
    """A fresh 16-byte key for one file."""
    return os.urandom(BLOCK)


def encrypt(plaintext: bytes, key: bytes) -> bytes:
    padder = padding.PKCS7(128).padder()
    padded = padder.update(plaintext) + padder.finalize()
    encryptor = Cipher(algorithms.AES(key), modes.ECB()).encryptor()  # noqa: S305 - the CDN's
    return encryptor.update(padded) + encryptor.finalize()


def decrypt(ciphertext: bytes, key: bytes) -> bytes:
    """The plaintext; ValueError for a wrong size, a wrong key or bad padding."""
    if not ciphertext or len(ciphertext) % BLOCK:
        raise ValueError(f"the ciphertext is {len(ciphertext)} bytes, not a whole number "
                         "of AES blocks")
    decryptor = Cipher(algorithms.AES(key), modes.ECB()).decryptor()  # noqa: S305
    padded = decryptor.update(ciphertext) + decryptor.finalize()
    unpadder = padding.PKCS7(128).unpadder()
    try:
        return unpadder.update(padded) + unpadder.finalize()
    except ValueError:
        raise ValueError("the media did not decrypt (wrong key or damaged file)") from None


def parse_key(*, hex_key: str | None = None, b64_key: str | None = None) -> bytes:
    """The 16-byte key from an item: the hex ``aeskey`` when present (preferred), else
    the base64 ``aes_key`` holding 16 raw bytes or 32 hex characters."""
    if hex_key:
        key = _from_hex(hex_key)
        if key is not None:
            return key
    if b64_key:
        try:
            raw = base64.b64decode(b64_key, validate=False)
        except (binascii.Error, ValueError):
            raw = b""
        if len(raw) == BLOCK:
            return raw
        if len(raw) == 2 * BLOCK:
            key = _from_hex(raw.decode("ascii", "replace"))
            if key is not None:
                return key
    raise ValueError("the item has no usable AES key (expected 32 hex characters, or base64 "
                     "of 16 bytes or of 32 hex characters)")


def _from_hex(text: str) -> bytes | None:
    try:
        key = bytes.fromhex(text)
    except ValueError:
        return None
    return key if len(key) == BLOCK else None


def md5_hex(data: bytes) -> str:
    return hashlib.md5(data, usedforsecurity=False).hexdigest()
