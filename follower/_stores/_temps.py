"""The temporary files of a filesystem store's puts, and their removal when the process exits.

A put writes its object to a temporary file beside its target (``os.link`` needs
one filesystem) and links it into place. A put runs on a daemon thread, which
the interpreter stops where it is when it exits: what such a put had written is
removed then (never a half-written object: it had no link yet). A process killed
(SIGKILL, os._exit) leaves them: hidden from every listing, no key names them,
safe to delete when no put is running.
"""

from __future__ import annotations

import atexit
import re
import secrets
import threading
from typing import TYPE_CHECKING

from .._errors import StoreError

if TYPE_CHECKING:
    from pathlib import Path

# A name no listing shows and no key can take: 37 bytes whatever the key, so a
# name of MAX_SEGMENT_BYTES still fits the filesystem's 255 with its temp file.
# Before, the name was ".<target>.<hex>.tmp": such leftovers stay hidden too.
TEMP_NAME = re.compile(r"\.(?:.+\.)?[0-9a-f]{32}\.tmp")


def temp_name() -> str:
    return f".{secrets.token_hex(16)}.tmp"


# The temporary files of this process's puts that have not finished.
_UNFINISHED: set[Path] = set()
_UNFINISHED_LOCK = threading.Lock()
_exiting = False
# Removing them at exit is bounded too: a stalled disk must not hold the exit.
EXIT_CLEANUP_SECONDS = 2.0


def start_temp(temp: Path, key: str) -> None:
    """Count ``temp`` as a put's until :func:`finish_temp`; refused once the process exits."""
    with _UNFINISHED_LOCK:
        check_not_exiting(key)
        _UNFINISHED.add(temp)


def check_not_exiting(key: str) -> None:
    """A put of ``key`` may go on: the exit's cleanup has not looked yet."""
    if _exiting:
        raise StoreError(f"cannot write {key!r}: the process is exiting", key=key)


def finish_temp(temp: Path) -> None:
    temp.unlink(missing_ok=True)
    with _UNFINISHED_LOCK:
        _UNFINISHED.discard(temp)


def _unlink_all(temps: list[Path]) -> None:
    for temp in temps:
        temp.unlink(missing_ok=True)


@atexit.register
def _remove_unfinished_temps() -> None:
    global _exiting  # one flag for the whole process, set once
    with _UNFINISHED_LOCK:
        _exiting = True
        temps = list(_UNFINISHED)
    if not temps:
        return
    remover = threading.Thread(target=_unlink_all, args=(temps,), daemon=True)
    try:
        remover.start()
    except RuntimeError:
        # Python 3.12 starts no thread at interpreter shutdown: remove them here,
        # unbounded then, but an unlink is not the fsync that stalled.
        _unlink_all(temps)
        return
    remover.join(EXIT_CLEANUP_SECONDS)
