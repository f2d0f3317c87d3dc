"""The worker SDK's public API is exactly ``__all__``, and every name in it is documented."""

from __future__ import annotations

import actuators.workers as workers


def test_all_names_are_exported_and_documented() -> None:
    exported = {name for name in dir(workers) if not name.startswith("_")}
    modules = {  # the SDK's submodules (imported by the package, not its API)
        "worker",
        "committing",
        "control",
        "dedupe",
        "dedupe_pg",
        "dedupe_sql",
        "engine",
        "engine_settings",
        "group_protocol",
        "handling",
        "handoff",
        "lanes",
        "metrics",
        "obeying",
        "pool",
        "process_child",
        "process_lanes",
        "processes",
        "producer",
        "outcomes",
        "progress",
        "supervisor",  # lagpilot workers (a command, not the SDK's API): imported by its tests
        "threads",
        "tracker",
    }
    assert set(workers.__all__) == exported - modules
    for name in workers.__all__:
        member = getattr(workers, name)
        if callable(member):
            assert member.__doc__, f"{name} has no docstring"


def test_all_is_sorted_and_unique() -> None:
    assert len(set(workers.__all__)) == len(workers.__all__)
    assert workers.__all__ == sorted(workers.__all__, key=lambda n: (not n.isupper(), n))
