"""Inbound media: files that arrive with messages, saved under the workspace.

``<workspace>/media/inbound/<channel>/<account>/<YYYY-MM-DD>/<time>-<name>``,
written in chunks with a size cap, so a huge upload can neither fill the disk
nor sit in memory. A file over the cap is not kept: the message still goes
through, and the agent reads that the file was too large.
"""

from __future__ import annotations

import os
import re
import time
import uuid
from collections.abc import AsyncIterable, Iterable
from datetime import datetime
from pathlib import Path

from chatkernel.sdk.models import MediaRef

DEFAULT_MAX_BYTES = 20 * 1024 * 1024


class MediaTooLarge(Exception):
    """An inbound file was larger than the cap."""

    def __init__(self, size: int, cap: int) -> None:
        super().__init__(f"{_mb(size)} is over the {_mb(cap)} cap")
        self.size = size
        self.cap = cap


def _mb(size: int) -> str:
    return f"{size / (1024 * 1024):.1f} MB"


def _safe(part: str, fallback: str = "_") -> str:
    cleaned = re.sub(r"[^\w.\-]+", "_", part, flags=re.ASCII).strip("._")
    return cleaned[:120] or fallback


def inbound_media_dir(workspace: Path, channel: str, account: str,
                      when: float | None = None) -> Path:
    """``<workspace>/media/inbound/<channel>/<account>/<YYYY-MM-DD>/``, created."""
    day = datetime.fromtimestamp(time.time() if when is None else when).strftime("%Y-%m-%d")
    path = workspace / "media" / "inbound" / _safe(channel) / _safe(account) / day
    path.mkdir(parents=True, exist_ok=True)
    return path


async def save_inbound_media(workspace: Path, channel: str, account: str,
                             chunks: AsyncIterable[bytes] | Iterable[bytes] | bytes, *,
                             kind: str, filename: str | None = None, mime: str | None = None,
                             platform_id: str | None = None,
                             max_bytes: int = DEFAULT_MAX_BYTES,
                             declared_size: int | None = None) -> MediaRef:
    """Write an inbound file under the workspace and describe it.

    ``chunks`` may be bytes, an iterable or an async iterable of bytes (an
    HTTP body read in pieces). A file whose declared size is over
    ``max_bytes`` is refused before a byte is read; one that grows past it is
    deleted. Either way the returned MediaRef has no path and a ``note``
    saying why, so the message still reaches the agent.
    """
    ref = MediaRef(kind=kind, mime=mime, filename=filename, platform_id=platform_id)
    if declared_size is not None and declared_size > max_bytes:
        ref.size = declared_size
        ref.note = f"not saved: {MediaTooLarge(declared_size, max_bytes)}"
        return ref
    directory = inbound_media_dir(workspace, channel, account)
    stem = _safe(Path(filename).name if filename else "", fallback=kind)
    target = directory / f"{time.strftime('%H%M%S')}-{uuid.uuid4().hex[:8]}-{stem}"
    size = 0
    try:
        with open(target, "xb") as handle:
            os.chmod(target, 0o600)
            async for chunk in _aiter(chunks):
                size += len(chunk)
                if size > max_bytes:
                    raise MediaTooLarge(size, max_bytes)
                handle.write(chunk)
    except MediaTooLarge as exc:
        target.unlink(missing_ok=True)
        ref.size = size
        ref.note = f"not saved: {exc}"
        return ref
    except BaseException:
        target.unlink(missing_ok=True)
        raise
    ref.path = target
    ref.size = size
    return ref


async def _aiter(chunks):
    if isinstance(chunks, (bytes, bytearray, memoryview)):
        yield bytes(chunks)
    elif hasattr(chunks, "__aiter__"):
        async for chunk in chunks:
            yield chunk
    else:
        for chunk in chunks:
            yield chunk
