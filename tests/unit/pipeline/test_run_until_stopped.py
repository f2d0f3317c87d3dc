"""A broker that forgot the pipeline's group (restart) must not stop the pipeline: Quix
Streams ends ``run()`` with ``CheckpointConsumerCommitError``; ``run_until_stopped`` builds a
new app and runs again. Anything else still ends the run. Found by bench/faults/rows.py, row 1."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import KafkaError
from quixstreams.checkpointing.exceptions import CheckpointConsumerCommitError

from pipeline.__main__ import run_until_stopped


class FakeApp:
    def __init__(self, outcome: BaseException | None) -> None:
        self.outcome = outcome

    def run(self) -> None:
        if self.outcome is not None:
            raise self.outcome


def builder(*outcomes: BaseException | None) -> tuple[Any, list[tuple[Any, ...]]]:
    calls: list[tuple[Any, ...]] = []
    pending = list(outcomes)

    def build(settings: Any, metrics: Any, policy: Any = None) -> tuple[FakeApp, None]:
        calls.append((settings, metrics, policy))
        return FakeApp(pending.pop(0)), None

    return build, calls


def commit_refused() -> CheckpointConsumerCommitError:
    return CheckpointConsumerCommitError(KafkaError(KafkaError.UNKNOWN_MEMBER_ID))


def test_a_refused_commit_rebuilds_the_app_with_the_same_policy_and_runs_again() -> None:
    build, calls = builder(commit_refused(), commit_refused(), None)
    policy = object()  # its budget and cooldowns must carry over, not start afresh
    run_until_stopped(build, "settings", "metrics", policy, pause_s=0)
    assert len(calls) == 3
    assert all(c == ("settings", "metrics", policy) for c in calls)


def test_other_errors_still_end_the_run() -> None:
    build, calls = builder(RuntimeError("a bug"))
    with pytest.raises(RuntimeError, match="a bug"):
        run_until_stopped(build, "settings", "metrics", None, pause_s=0)
    assert len(calls) == 1


def test_a_producer_timeout_or_a_dead_source_rebuilds_the_app() -> None:
    """Row 2 of bench/faults/rows.py: with a node of three down, the checkpoint's flush timed out
    and the commits source's process ended; both ended the pipeline for good."""
    from quixstreams.checkpointing.exceptions import CheckpointProducerTimeout
    from quixstreams.sources.base.exceptions import SourceException

    class DeadSource:
        pid, exitcode, source = 4242, 1, "lagpilot-inputs"

    build, calls = builder(
        CheckpointProducerTimeout("flush timed out"), SourceException(DeadSource()), None
    )
    run_until_stopped(build, "settings", "metrics", None, pause_s=0)
    assert len(calls) == 3


def test_a_crash_loop_ends_the_run_after_the_quick_failures_allowed() -> None:
    build, calls = builder(*[commit_refused() for _ in range(4)])
    with pytest.raises(CheckpointConsumerCommitError):
        run_until_stopped(build, "settings", "metrics", None, pause_s=0, max_quick_failures=3)
    assert len(calls) == 4


def test_a_run_that_stayed_up_resets_the_quick_failure_count() -> None:
    build, calls = builder(*[commit_refused() for _ in range(5)], None)
    run_until_stopped(
        build, "settings", "metrics", None, pause_s=0, max_quick_failures=1, steady_s=0.0
    )
    assert len(calls) == 6
