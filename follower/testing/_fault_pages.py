"""Pages gone wrong: a cursor-read page sent the way the agent's fault says.

The agent builds a valid page first and only then spoils it, so every
malformation is one field away from a page a follower would accept.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._asgi import JSON, respond
from ._faults import DEFAULT_OVERSIZED_BYTES, FaultKind
from ._json import dumps

if TYPE_CHECKING:
    from ._asgi import Send
    from ._faults import Fault

_MALFORMATIONS = frozenset(
    {
        FaultKind.NOT_JSON,
        FaultKind.NOT_AN_OBJECT,
        FaultKind.MISSING_FIELD,
        FaultKind.UNKNOWN_STATE,
        FaultKind.CURSOR_MISMATCH,
        FaultKind.OTHER_TASK,
        FaultKind.NO_PROGRESS,
    }
)
# Padding goes out in pieces this big: the agent never builds an oversized page whole.
_OVERSIZED_CHUNK_BYTES = 1024 * 1024


async def send_page(send: Send, page: dict[str, Any], fault: Fault | None) -> None:
    """Send ``page`` with a 200: as it is, or malformed or oversized as ``fault`` says."""
    if fault is not None and fault.kind is FaultKind.OVERSIZED:
        await _send_oversized(send, page, fault.size_bytes or DEFAULT_OVERSIZED_BYTES)
    elif fault is not None and fault.kind in _MALFORMATIONS:
        await respond(send, 200, _malformed(page, fault), JSON)
    else:
        await respond(send, 200, dumps(page), JSON)


def _malformed(page: dict[str, Any], fault: Fault) -> bytes:
    kind = fault.kind
    if kind is FaultKind.NOT_JSON:
        return b"<html><body>502 Bad Gateway</body></html>"
    if kind is FaultKind.NOT_AN_OBJECT:
        return dumps([page])
    bad = dict(page)
    if kind is FaultKind.MISSING_FIELD:
        del bad[fault.field or "next"]
    elif kind is FaultKind.UNKNOWN_STATE:
        bad["state"] = "paused"
    elif kind is FaultKind.CURSOR_MISMATCH:
        bad["next"] = page["next"] + 1
    elif kind is FaultKind.OTHER_TASK:
        bad["task_id"] = f"{page['task_id']}-other"
    elif kind is FaultKind.NO_PROGRESS:
        bad.update(events=[], next=page["next"] - len(page["events"]), has_more=True)
    return dumps(bad)


async def _send_oversized(send: Send, page: dict[str, Any], size: int) -> None:
    """A valid page padded with an extra field to ``size`` bytes, sent in chunks."""
    head = dumps(page)[:-1] + b',"padding":"'
    tail = b'"}'
    padding = max(0, size - len(head) - len(tail))
    length = len(head) + padding + len(tail)
    headers = [(b"content-type", JSON), (b"content-length", str(length).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": head, "more_body": True})
    chunk = b"x" * min(padding, _OVERSIZED_CHUNK_BYTES)
    while padding > 0:
        piece = chunk[:padding]
        padding -= len(piece)
        await send({"type": "http.response.body", "body": piece, "more_body": True})
    await send({"type": "http.response.body", "body": tail})
