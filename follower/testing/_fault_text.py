"""Faults written as text, ``kind[:parameter]``, as a command line takes them."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._faults import Fault, FaultKind

if TYPE_CHECKING:
    from collections.abc import Callable

FAULT_NAMES = (
    "close, silent, unavailable[:READS], not-json, not-an-object, missing-field, "
    "unknown-state, cursor-mismatch, other-task, no-progress, oversized, gone[:EVENTS], "
    "restart, slow[:SECONDS]"
)
"""The faults :func:`parse_fault` reads, with their parameters, for a usage message."""

# The kinds written without a parameter, each with its named constructor's defaults.
_PLAIN: dict[FaultKind, Callable[[], Fault]] = {
    FaultKind.CLOSE: Fault.close,
    FaultKind.SILENT: Fault.silent,
    FaultKind.NOT_JSON: Fault.not_json,
    FaultKind.NOT_AN_OBJECT: Fault.not_an_object,
    FaultKind.MISSING_FIELD: Fault.missing_field,
    FaultKind.UNKNOWN_STATE: Fault.unknown_state,
    FaultKind.CURSOR_MISMATCH: Fault.cursor_mismatch,
    FaultKind.OTHER_TASK: Fault.other_task,
    FaultKind.NO_PROGRESS: Fault.no_progress,
    FaultKind.OVERSIZED: Fault.oversized,
    FaultKind.RESTART: Fault.restart,
}


def parse_fault(text: str | None, events_per_task: int) -> Fault | None:
    """The :class:`Fault` that ``text`` (``kind[:parameter]``) names; None for None.

    ``unavailable:READS`` fails the first READS reads (every read without it);
    ``gone:EVENTS`` goes away after EVENTS events of a task (by default half of
    ``events_per_task``, at least 1); ``slow:SECONDS`` takes SECONDS per read
    (by default 1). Raises :class:`ValueError` naming the faults on a bad ``text``.
    """
    if text is None:
        return None
    kind_text, _, parameter = text.partition(":")
    try:
        kind = FaultKind(kind_text)
    except ValueError:
        raise ValueError(f"unknown fault {text!r}; one of: {FAULT_NAMES}") from None
    try:
        if kind is FaultKind.UNAVAILABLE:
            return Fault.unavailable(reads=int(parameter)) if parameter else Fault.unavailable()
        if kind is FaultKind.GONE:
            return Fault.gone(int(parameter) if parameter else max(1, events_per_task // 2))
        if kind is FaultKind.SLOW:
            return Fault.slow(float(parameter) if parameter else 1.0)
    except ValueError as exc:
        raise ValueError(f"bad fault {text!r}: {exc}") from None
    if parameter:
        raise ValueError(f"fault {kind.value!r} takes no parameter")
    return _PLAIN[kind]()
