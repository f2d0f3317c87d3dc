"""The brokers tests start of their own stay inside their checkout's block of ports
(``tests/support/ports.py``): no two share a port, none takes the session broker's, and
the whole block follows LAGPILOT_BROKER_PORT."""

from __future__ import annotations

import pytest
from support.ports import BLOCK, DEFAULT_BASE, OFFSETS, base, own_port

WIDTH = {"cluster": 6, "sasl_metrics": 1}  # ports each takes; a single broker takes two


def taken(name: str) -> range:
    start = own_port(name)
    return range(start, start + WIDTH.get(name, 2))


@pytest.mark.parametrize("first", [None, "27092", "21092", "29000"])
def test_own_brokers_fit_the_block_apart_from_each_other_and_the_session_broker(
    monkeypatch: pytest.MonkeyPatch, first: str | None
) -> None:
    if first is None:
        monkeypatch.delenv("LAGPILOT_BROKER_PORT", raising=False)
    else:
        monkeypatch.setenv("LAGPILOT_BROKER_PORT", first)
    start = int(first) if first else DEFAULT_BASE
    assert base() == start
    ports = [p for name in OFFSETS for p in taken(name)]
    assert len(ports) == len(set(ports)), "two own brokers share a port"
    assert min(ports) >= start + 2, "the session broker's two ports are its own"
    assert max(ports) < start + BLOCK < 32768


def test_the_sasl_broker_of_a_checkout_at_27092_stays_in_27092_27119(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("LAGPILOT_BROKER_PORT", "27092")
    assert own_port("sasl") == 27108 and own_port("cluster") == 27094


@pytest.mark.parametrize("bad", ["abc", "80", "32760"])
def test_a_base_the_block_cannot_use_says_what_to_set(
    monkeypatch: pytest.MonkeyPatch, bad: str
) -> None:
    monkeypatch.setenv("LAGPILOT_BROKER_PORT", bad)
    with pytest.raises(ValueError, match=r"LAGPILOT_BROKER_PORT=.*e\.g\. 27092"):
        own_port("sasl")
