"""The testing kit's public face (``follower.testing``) and its fault text form."""

from __future__ import annotations

import inspect
import re

import pytest

import follower.testing
from follower.testing import FAULT_NAMES, Fault, FaultKind, parse_fault

KIT_NAMES = {
    "AgentRequest",
    "AgentStatistics",
    "FAULT_NAMES",
    "Fault",
    "FaultKind",
    "ReferenceAgent",
    "TaskScript",
    "parse_fault",
    "serve_agent",
}


def test_all_is_exactly_the_public_names() -> None:
    public = {
        name
        for name, value in vars(follower.testing).items()
        if not name.startswith("_") and not inspect.ismodule(value)
    }
    assert set(follower.testing.__all__) == KIT_NAMES
    assert len(follower.testing.__all__) == len(KIT_NAMES)
    assert public == KIT_NAMES


@pytest.mark.parametrize("name", sorted(KIT_NAMES - {"FAULT_NAMES"}))
def test_public_names_report_the_public_module(name: str) -> None:
    assert getattr(follower.testing, name).__module__ == "follower.testing"


def test_none_is_no_fault() -> None:
    assert parse_fault(None, 40) is None


@pytest.mark.parametrize(
    ("text", "fault"),
    [
        ("close", Fault.close()),
        ("silent", Fault.silent()),
        ("unavailable", Fault.unavailable()),
        ("unavailable:2", Fault.unavailable(reads=2)),
        ("not-json", Fault.not_json()),
        ("not-an-object", Fault.not_an_object()),
        ("missing-field", Fault.missing_field()),
        ("unknown-state", Fault.unknown_state()),
        ("cursor-mismatch", Fault.cursor_mismatch()),
        ("other-task", Fault.other_task()),
        ("no-progress", Fault.no_progress()),
        ("oversized", Fault.oversized()),
        ("gone", Fault.gone(20)),
        ("gone:0", Fault.gone(0)),
        ("gone:7", Fault.gone(7)),
        ("restart", Fault.restart()),
        ("slow", Fault.slow(1.0)),
        ("slow:0.25", Fault.slow(0.25)),
    ],
)
def test_a_fault_from_its_text(text: str, fault: Fault) -> None:
    assert parse_fault(text, 40) == fault


def test_gone_defaults_to_half_the_events_and_at_least_one() -> None:
    assert parse_fault("gone", 9) == Fault.gone(4)
    assert parse_fault("gone", 1) == Fault.gone(1)
    assert parse_fault("gone", 0) == Fault.gone(1)


def test_every_kind_reads_and_is_named() -> None:
    for kind in FaultKind:
        fault = parse_fault(kind.value, 40)
        assert fault is not None
        assert fault.kind is kind
        assert kind.value in FAULT_NAMES


def test_an_unknown_fault_names_the_known_ones() -> None:
    message = f"unknown fault 'wobbly'; one of: {FAULT_NAMES}"
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        parse_fault("wobbly", 40)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("unavailable:two", "bad fault 'unavailable:two': invalid literal for int()"),
        ("unavailable:0", "bad fault 'unavailable:0': reads must be a positive int, not 0"),
        ("gone:-1", "bad fault 'gone:-1': GONE needs after_events >= 0"),
        ("slow:soon", "bad fault 'slow:soon': could not convert string to float"),
        ("slow:0", "bad fault 'slow:0': seconds must be a positive number of seconds, not 0.0"),
    ],
)
def test_a_bad_parameter_says_which_fault(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=f"^{re.escape(message)}"):
        parse_fault(text, 40)


def test_a_plain_fault_takes_no_parameter() -> None:
    with pytest.raises(ValueError, match=r"^fault 'close' takes no parameter$"):
        parse_fault("close:3", 40)
