"""A store that keeps nothing: what is measured is the library's, not the store's."""

from __future__ import annotations

import anyio.lowlevel


class NullStore:
    """A write-once store that keeps nothing and lists nothing; reading back is a test's bug."""

    async def put(self, key: str, body: bytes, *, content_type: str) -> None:
        await anyio.lowlevel.checkpoint()

    async def get(self, key: str) -> bytes:
        raise AssertionError(f"nothing is read back: {key}")

    async def list(self, prefix: str, *, start_after: str | None = None) -> list[str]:
        await anyio.lowlevel.checkpoint()
        return []
