"""``throughput.py``, the old follower's side: one turn drained into a store, printed as JSON.

Runs in the venv ``tools/old-follower-venv`` makes (agentenv-framework 0.9.1364,
asyncio only), where ``follower`` is not installed. The same measurement as
``throughput.py``'s own side: a ``following_live_trajectory`` block whose body
follows the task and returns at once, so the drain reads every page, timed from
entry to exit; the store is one of the framework's ``ObjectStore`` ABC:

- ``memory``: a dict behind a lock (the framework has no in-memory store; its
  follower puts from worker threads, ``asyncio.to_thread``), write-once;
- ``filesystem``: the framework's own ``LocalFilesystemObjectStore`` (grants off).

Two changes to the old code, both for the benchmark only, both here:

- its drain is bounded by a module constant (``_DRAIN_SECONDS``, 60 s), which a
  slow drain of a million events would hit; it is raised to an hour, as ours is
  given ``drain_seconds=3600``;
- with ``--agent mock``, its follower makes its own ``httpx.AsyncClient()`` (one
  per follower, no way to pass one through ``following_live_trajectory``), so
  ``httpx.AsyncClient`` is replaced in this process by a subclass whose
  ``transport`` defaults to the same canned ``MockTransport`` ours reads from.
  Nothing else of httpx changes: the client layer is measured as it runs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import threading
import time
from typing import Any

from _measure import CANNED_TASK, RESULT_MARK, canned_agent

PREFIX = "bench/"
TURN = "turn-1"


def memory_store() -> Any:
    from agent_env.store.base import ObjectAlreadyExistsError, ObjectNotFoundError
    from agent_env.store.object_store.object_store import ObjectStore

    class MemoryObjectStore(ObjectStore):
        """The framework's ObjectStore ABC over a dict: what its follower uses, write-once."""

        def __init__(self) -> None:
            self._objects: dict[str, bytes] = {}
            self._lock = threading.Lock()

        def put(
            self,
            key: str,
            data: bytes,
            content_type: str = "application/octet-stream",
            allow_overwrite: bool = False,
        ) -> str:
            with self._lock:
                if key in self._objects and not allow_overwrite:
                    raise ObjectAlreadyExistsError(key)
                self._objects[key] = bytes(data)
            return "mem://" + key

        def get(self, object_url: str) -> bytes:
            try:
                return self._objects[object_url.removeprefix("mem://")]
            except KeyError:
                raise ObjectNotFoundError(object_url) from None

        def list(self, prefix: str) -> list[str]:
            return sorted(key for key in self._objects if key.startswith(prefix))

        def object_url(self, key: str) -> str:
            return "mem://" + key

        def _unused(self, *args: object, **kwargs: object) -> Any:
            raise NotImplementedError("not used by the live trajectory follower")

        put_file = put_file_at = get_object_metadata = get_object_metadata_at = _unused
        list_at = get_object_key = download_to_file = _unused

    return MemoryObjectStore()


def default_to_transport(transport: Any) -> None:
    """Every ``httpx.AsyncClient()`` made from now on in this process reads from ``transport``."""
    import httpx

    class CannedAsyncClient(httpx.AsyncClient):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            kwargs.setdefault("transport", transport)
            super().__init__(*args, **kwargs)

    httpx.AsyncClient = CannedAsyncClient  # type: ignore[misc]


async def drain_once(store: Any, endpoint: str, task_id: str) -> tuple[float, float]:
    from agent_env.task_step.snapshot_utils import live_trajectory

    live_trajectory._DRAIN_SECONDS = 3600  # as ours is given drain_seconds=3600
    wall, cpu = time.perf_counter(), time.process_time()
    async with live_trajectory.following_live_trajectory(
        endpoint, store, PREFIX, TURN, poll_interval_seconds=1.0
    ) as turn:
        turn.follow(task_id)
    return time.perf_counter() - wall, time.process_time() - cpu


def run(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(dir=args.tmp) as folder:
        if args.store == "memory":
            store = memory_store()
        else:
            from agent_env.store.object_store.local.store import LocalFilesystemObjectStore

            store = LocalFilesystemObjectStore(folder, grants="off")
        if args.endpoint is None:
            default_to_transport(canned_agent(args.events))
            endpoint, task_id = "http://agent.test/ext/trajectory", CANNED_TASK
        else:
            endpoint, task_id = args.endpoint, args.task_id
        wall, cpu = asyncio.run(drain_once(store, endpoint, task_id))
        directory = f"{PREFIX}{TURN}/live/"
        keys = store.list(directory)
        chunks = sum(len(store.get(store.object_url(k))) for k in keys if k.endswith(".jsonl"))
        end_key = directory + "end.json"
        end = json.loads(store.get(store.object_url(end_key))) if end_key in keys else None
    return {
        "side": "old",
        "store": args.store,
        "events": args.events,
        "seconds": wall,
        "events_per_second": args.events / wall,
        "mb_per_second": chunks / wall / 1e6,
        "cpu_us_per_event": cpu / args.events * 1e6,
        "chunk_bytes": chunks,
        "end": end,
        # The old end mark has no "complete": it was read to the end when it counts every event.
        "all_stored": end == {"state": "completed", "next": args.events},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--store", choices=["memory", "filesystem"], required=True)
    parser.add_argument("--events", type=int, required=True)
    parser.add_argument("--endpoint", default=None, help="a real agent's read URL (else: mock)")
    parser.add_argument("--task-id", default=None)
    parser.add_argument("--tmp", default=None)
    args = parser.parse_args(argv)
    print(RESULT_MARK + json.dumps(run(args)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
