"""CPU of one idle poll of a reader tailing a long turn: whole listings, ``start_after``, versions.

A turn holds N one-event chunks and no end mark (its step is still running).
``read_live_trajectory`` reads them all, then polls for more; this measures the
CPU (``time.process_time``, worker threads included) of the polls that find
nothing new, in three ways on each store:

- ``whole``: the store's ``list`` takes no ``start_after`` (a store of the old
  protocol), so every poll lists the whole folder;
- ``start_after``: the store lists only what sorts after the last chunk read,
  and offers no ``folder_version`` (every poll lists: a filesystem still reads
  every name of the folder);
- ``version``: the store also offers its ``folder_version`` (``FilesystemStore``
  does; ``MemoryStore`` has none, so there it is ``start_after`` again): a poll
  whose folder has not changed lists nothing.

Nothing is asserted. The filesystem turn is written as plain files (the layout
is files; the store's fsync per put would only slow the setup down), and its
folder's mtime set 60 s back: a folder written in the last few seconds is not
vouched for (its stamps may not have ticked yet), as a step idle for that long.

    python benchmarks/idle_poll.py                      # 1,000, 10,000 and 50,000 chunks
    python benchmarks/idle_poll.py --chunks 1000 --polls 10 --backend trio
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

from follower import FilesystemStore, MemoryStore, ObjectStore, read_live_trajectory

PREFIX = "steps/s1/"
# Whose turn it is, as the layout says (docs/protocol.md): the reader holds task.json to it.
TASK_MARK = b'{"task_id":"t","endpoint":"http://agent.test/ext/trajectory","started_at":"2026-12-01T00:00:00.000Z"}'
TURN = "turn-1"
LIVE = f"{PREFIX}{TURN}/live/"


def chunk_name(n: int) -> str:
    return f"{n:08d}-{n + 1:08d}.jsonl"


def event_line(n: int) -> bytes:
    return json.dumps({"index": n, "kind": "step"}, separators=(",", ":")).encode() + b"\n"


class CountedStore:
    """Passes calls on, counting polls and listings; each mode hides what it does not offer."""

    def __init__(self, inner: ObjectStore) -> None:
        self.inner = inner
        self.polls = 0
        self.listings = 0
        self.keys_listed = 0
        self.polled = anyio.Event()

    async def put(self, key: str, body: bytes, *, content_type: str) -> None:
        await self.inner.put(key, body, content_type=content_type)

    async def get(self, key: str) -> bytes:
        return await self.inner.get(key)

    def _poll(self) -> None:
        self.polls += 1
        self.polled.set()

    async def _counted(self, keys: list[str]) -> list[str]:
        self.listings += 1
        self.keys_listed += len(keys)
        self._poll()
        return keys


class WholeListings(CountedStore):
    async def list(self, prefix: str) -> list[str]:
        return await self._counted(await self.inner.list(prefix))


class ListingsAfter(CountedStore):
    async def list(self, prefix: str, *, start_after: str | None = None) -> list[str]:
        if start_after is None:  # as a reader of the old protocol asks (run on old code too)
            return await self._counted(await self.inner.list(prefix))
        return await self._counted(await self.inner.list(prefix, start_after=start_after))


class VersionedListings(CountedStore):
    """Lists after ``start_after``, and passes the inner store's ``folder_version`` on."""

    async def list(self, prefix: str, *, start_after: str | None = None) -> list[str]:
        keys = await self.inner.list(prefix, start_after=start_after)
        self.listings += 1
        self.keys_listed += len(keys)
        if not hasattr(self.inner, "folder_version"):
            self._poll()  # no version to ask: each listing is a poll
        return keys

    async def folder_version(self, folder: str) -> object | None:
        method = getattr(self.inner, "folder_version", None)
        if method is None:
            return None  # the reader lists, and that listing is the poll
        version: object | None = await method(folder)
        self._poll()
        return version


MODES: dict[str, type[CountedStore]] = {
    "whole": WholeListings,
    "start_after": ListingsAfter,
    "version": VersionedListings,
}


async def memory_turn(chunks: int, _root: Path) -> ObjectStore:
    store = MemoryStore()
    await store.put(LIVE + "task.json", TASK_MARK, content_type="application/json")
    for n in range(chunks):
        await store.put(LIVE + chunk_name(n), event_line(n), content_type="application/jsonl")
    return store


async def filesystem_turn(chunks: int, root: Path) -> ObjectStore:
    folder = root.joinpath(*LIVE.strip("/").split("/"))
    folder.mkdir(parents=True)
    (folder / "task.json").write_bytes(TASK_MARK)
    for n in range(chunks):
        (folder / chunk_name(n)).write_bytes(event_line(n))
    still_since = time.time() - 60  # as a step that has written nothing for a minute
    os.utime(folder, (still_since, still_since))
    return FilesystemStore(root)


async def idle_poll_seconds(
    store: CountedStore, chunks: int, polls: int, poll_interval: float
) -> tuple[float, float]:
    """CPU seconds of one idle poll, and keys listed per idle poll."""
    result: list[float] = []
    async with anyio.create_task_group() as tg:

        async def read() -> None:
            seen = 0
            async for _ in read_live_trajectory(
                store, PREFIX, TURN, poll_interval_seconds=poll_interval
            ):
                seen += 1
            raise AssertionError(f"the reader ended after {seen} events")

        async def measure() -> None:
            while store.polls < 2:  # the first reads every chunk; the second is idle
                store.polled = anyio.Event()
                await store.polled.wait()
            first, keys_before = store.polls, store.keys_listed
            started = time.process_time()
            while store.polls < first + polls:
                store.polled = anyio.Event()
                await store.polled.wait()
            cpu = time.process_time() - started
            done = store.polls - first
            result.extend([cpu / done, (store.keys_listed - keys_before) / done])
            tg.cancel_scope.cancel()

        tg.start_soon(read)
        tg.start_soon(measure)
    return result[0], result[1]


async def main_async(args: argparse.Namespace) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    makers = {"memory": memory_turn, "filesystem": filesystem_turn}
    for chunks in args.chunks:
        for kind in args.stores:
            with tempfile.TemporaryDirectory(dir=args.tmp) as root:
                inner = await makers[kind](chunks, Path(root))
                figures = {}
                for mode, wrapper in MODES.items():
                    store = wrapper(inner)
                    figures[mode] = await idle_poll_seconds(
                        store, chunks, args.polls, args.poll_interval
                    )
                row: dict[str, Any] = {"store": kind, "chunks": chunks}
                for mode, (seconds, keys) in figures.items():
                    row[f"{mode}_ms"] = seconds * 1e3
                    row[f"{mode}_keys"] = keys
                rows.append(row)
                print_row(row)
    return rows


def print_row(row: dict[str, Any]) -> None:
    cells = "".join(f" {row[f'{m}_ms']:>10.3f} {row[f'{m}_keys']:>7.0f}" for m in MODES)
    print(f"{row['store']:<11} {row['chunks']:>7}{cells}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument(
        "--chunks",
        type=lambda text: [int(n) for n in text.split(",")],
        default=[1_000, 10_000, 50_000],
        help="comma-separated chunk counts (default: 1000,10000,50000)",
    )
    parser.add_argument("--stores", default="memory,filesystem", type=lambda t: t.split(","))
    parser.add_argument("--polls", type=int, default=20, help="idle polls measured (default 20)")
    parser.add_argument("--poll-interval", type=float, default=0.001)
    parser.add_argument("--backend", default="asyncio", choices=["asyncio", "trio"])
    parser.add_argument("--tmp", default=None, help="where the filesystem turn is written")
    parser.add_argument("--json", type=Path, default=None, help="also write the rows here")
    args = parser.parse_args()
    print(f"backend {args.backend}, pid {os.getpid()}; CPU ms per idle poll, and keys it listed")
    print(f"{'store':<11} {'chunks':>7}" + "".join(f" {m + ' ms':>10} {'keys':>7}" for m in MODES))
    rows = anyio.run(main_async, args, backend=args.backend)
    if args.json is not None:
        args.json.write_text(json.dumps({"backend": args.backend, "rows": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
