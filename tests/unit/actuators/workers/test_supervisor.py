"""``lagpilot workers``: the pure scale rules, which control events are obeyed, and a real
supervisor keeping real child processes (a sleeping Python), fed actions from a queue."""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from actuators.workers import supervisor as sv
from schemas import Keyring, SigningKey, encode, sign, stable_id, validate

KEY = b"supervisor-unit-test-signing-key-0123"
GROUP = "doc-parsers"
T0_MS = 1_800_000_000_000
SLEEPER = [sys.executable, "-c", "import time; time.sleep(600)"]


def action(replicas: int = 4, *, group: str = GROUP, now_ms: int = T0_MS, key: Any = KEY,
           **over: Any) -> dict[str, Any]:  # fmt: skip
    """A scale_consumers action as the policy publishes it (pipeline.decide.state's shape)."""
    params = {"group": group, "replicas": replicas, "partitions": 8}
    event = {
        "event": "action", "v": 1, "id": stable_id("scale_consumers", group, replicas, now_ms),
        "type": "scale_consumers", "target": f"group:{group}", "params": params,
        "reason": {"rule": "scale_consumers"}, "mode": "act", "issued_at": now_ms,
        "expires_at": now_ms + 30_000, "policy_version": "test", "signature": "",
    }  # fmt: skip
    event.update(over)
    return sign(event, key)


def bounds(lo: int = 1, hi: int = 8, lease_s: float = 60.0, step_s: float = 10.0) -> Any:
    return sv.Bounds(lo, hi, lease_s, step_s)


def hint(replicas: int, at_ms: int = T0_MS) -> Any:
    return sv.Hint("a" * 32, replicas, at_ms)


# --------------------------------------------------------------------------- the pure rules


def plan(h: Any, current: int, now_ms: int, b: Any = None, last_down_ms: int | None = None) -> int:
    b = b or bounds()
    return int(sv.desired_replicas(h, current=current, now_ms=now_ms, bounds=b,
                                     last_down_ms=last_down_ms).replicas)  # fmt: skip


def test_a_hint_scales_up_at_once_and_never_above_max() -> None:
    assert plan(hint(5), current=1, now_ms=T0_MS) == 5
    got = sv.desired_replicas(hint(50), current=2, now_ms=T0_MS, bounds=bounds(hi=8),
                                last_down_ms=None)  # fmt: skip
    assert got.replicas == 8 and "capped at --max" in got.why


def test_min_is_a_floor_with_or_without_a_hint() -> None:
    assert plan(None, current=0, now_ms=T0_MS, b=bounds(lo=2)) == 2
    assert plan(hint(1), current=2, now_ms=T0_MS, b=bounds(lo=2)) == 2  # below min: min
    assert plan(None, current=2, now_ms=T0_MS + 10**9, b=bounds(lo=2)) == 2  # never below
    assert plan(None, current=12, now_ms=T0_MS, b=bounds(hi=8)) == 8  # never above max


def test_no_scale_down_while_the_lease_holds_and_a_new_hint_renews_it() -> None:
    lease_end = T0_MS + 60_000
    assert plan(hint(5), current=5, now_ms=lease_end - 1) == 5
    assert plan(hint(2, at_ms=T0_MS), current=5, now_ms=T0_MS + 1) == 5  # lower hint: held
    renewed = hint(3, at_ms=lease_end - 1_000)
    assert plan(renewed, current=5, now_ms=lease_end + 30_000) == 5
    assert plan(renewed, current=5, now_ms=lease_end + 59_000) == 4


def test_after_the_lease_one_process_per_interval_down_to_min() -> None:
    h, b = hint(5), bounds(lo=2, lease_s=60, step_s=10)
    current, last_down, now, steps = 5, None, T0_MS + 59_000, []
    while now <= T0_MS + 200_000:
        got = plan(h, current, now, b, last_down)
        if got != current:
            assert got == current - 1
            steps.append((now - T0_MS) // 1000)
            current, last_down = got, now
        now += 1_000
    assert steps == [60, 70, 80]
    assert current == 2


def test_bad_bounds_name_the_flag_and_the_variable() -> None:
    with pytest.raises(sv.ConfigError, match=r"--max \(LAGPILOT_WORKERS_MAX\) = 1: .*--min"):
        sv.check_bounds(bounds(lo=2, hi=1))
    with pytest.raises(sv.ConfigError, match=r"--lease-s \(LAGPILOT_WORKERS_LEASE_S\) = 0"):
        sv.check_bounds(bounds(lease_s=0))
    with pytest.raises(sv.ConfigError, match="LAGPILOT_WORKERS_STOP_GRACE_S"):
        sv.check_bounds(bounds(), stop_grace_s=-1)


# --------------------------------------------------------------------------- which events


def read(event: dict[str, Any] | bytes, now_ms: int = T0_MS + 1, key: Any = KEY) -> Any:
    payload = event if isinstance(event, bytes) else encode(event)
    return sv.read_hint(payload, group=GROUP, key=key, now_ms=now_ms)


def test_a_signed_act_hint_for_our_group_is_read() -> None:
    got = read(action(6))
    assert (got.replicas, got.at_ms, got.action["type"]) == (6, T0_MS + 1, "scale_consumers")


def test_other_groups_expired_recommend_and_other_actions_are_not_obeyed() -> None:
    m = sv
    assert read(action(group="crawlers")) == m.OTHER_GROUP
    assert read(action(), now_ms=T0_MS + 30_001) == m.EXPIRED
    assert read(action(mode="recommend")) == m.RECOMMEND
    other = sign({**action(), "type": "restore_partition", "signature": "",
                  "params": {"group": GROUP, "topic": "t", "partition": 0}}, KEY)  # fmt: skip
    assert read(other) == m.NOT_SCALE


def test_unsigned_forged_and_altered_actions_are_never_obeyed() -> None:
    unsigned = {k: v for k, v in action().items() if k != "signature"}
    assert read(unsigned) == "schema"  # the schema requires a signature
    assert read({**action(), "signature": "0" * 64}) == "bad_signature"
    assert read(action(key=b"another-key-that-is-not-trusted-01")) == "bad_signature"
    altered = action(2)
    altered["params"] = {**altered["params"], "replicas": 64}
    assert read(altered) == "bad_signature"
    assert read(b"{not json") == "malformed"


def test_role_keys_are_checked_as_the_sdk_workers_check_them() -> None:
    decide, worker = SigningKey.generate("decide"), SigningKey.generate("worker")
    ring = Keyring.of([decide.public(), worker.public()])
    assert read(action(key=decide), key=ring).replicas == 4
    assert read(action(key=worker), key=ring) == "role_forbidden"
    assert read(action(), key=ring) == "unknown_key"  # shared-key signed, no shared key here


# --------------------------------------------------------------------------- real processes


class QueueSource:
    def __init__(self) -> None:
        self.queue: list[bytes | None] = []

    def poll(self, timeout_s: float) -> list[bytes | None]:
        out, self.queue = self.queue, []
        if not out:
            time.sleep(min(timeout_s, 0.02))
        return out


class ListSink:
    def __init__(self) -> None:
        self.sent: list[tuple[bytes, dict[str, Any]]] = []

    def send(self, key: bytes, event: dict[str, Any]) -> None:
        validate(event)
        self.sent.append((key, event))


class Clock:
    def __init__(self) -> None:
        self.ms = T0_MS

    def __call__(self) -> float:
        return self.ms / 1000


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:  # a zombie not reaped yet is not running
        return f.read().split(") ", 1)[1][0] != "Z"


def wait_for(what: str, pred: Callable[[], bool], timeout_s: float = 60, tick: Any = None) -> None:
    deadline = time.monotonic() + timeout_s
    while not pred():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout_s} s waiting for {what}")
        if tick is not None:
            tick()
        else:
            time.sleep(0.02)


def child_env(pid: int, timeout_s: float = 10.0) -> dict[str, str]:
    """The environment a running child was started with. /proc shows it once the child has
    exec'd; a busy host can let the test look a moment before that, so it waits for it."""
    deadline = time.monotonic() + timeout_s
    while True:
        raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        env = dict(item.decode().split("=", 1) for item in raw if b"=" in item)
        if "LAGPILOT_WORKER_INDEX" in env or time.monotonic() > deadline:
            return env
        time.sleep(0.02)


@pytest.fixture
def make() -> Any:
    made: list[Any] = []

    def build(cmd: list[str] = SLEEPER, lo: int = 1, hi: int = 3, grace_s: float = 5.0) -> Any:
        source, sink, clock = QueueSource(), ListSink(), Clock()
        sup = sv.Supervisor(group=GROUP, cmd=cmd, bounds=bounds(lo, hi), source=source,
                              key=KEY, sink=sink, instance="sup-1", stop_grace_s=grace_s,
                              env={**os.environ, "LAGPILOT_WORKER_INSTANCE_ID": "host-a"},
                              poll_s=0.02, clock=clock)  # fmt: skip
        made.append(sup)
        return sup, source, sink, clock

    yield build
    for sup in made:
        sup.shutdown()


def test_children_scale_restart_step_down_and_stop(make: Any) -> None:
    sup, source, sink, clock = make(lo=1, hi=3)
    sup.step()
    wait_for("the --min child", lambda: len(sup.pids()) == 1)
    hinted = action(5, now_ms=T0_MS)
    source.queue.append(encode(hinted))
    sup.step()
    pids = sup.pids()
    assert len(pids) == 3 and all(alive(p) for p in pids)  # 5 asked, capped at --max 3
    envs = [child_env(p) for p in pids]
    assert [e["LAGPILOT_WORKER_INDEX"] for e in envs] == ["0", "1", "2"]
    assert {e["LAGPILOT_WORKER_GROUP"] for e in envs} == {GROUP}
    assert [e["LAGPILOT_WORKER_INSTANCE_ID"] for e in envs] == ["host-a-0", "host-a-1", "host-a-2"]
    assert "PATH" in envs[0]  # the parent's environment too
    keys = [k for k, _ in sink.sent]
    assert keys == [f"{hinted['id']}|sup-1".encode(), hinted["id"].encode()]
    report, applied = (e for _, e in sink.sent)
    assert (report["did"], report["replicas"], report["instance"]) == ("scaled", 3, "sup-1")
    assert report["action_type"] == applied["action_type"] == "scale_consumers"
    assert (applied["result"], applied["action_id"]) == ("applied", hinted["id"])

    # a child that dies is restarted (after its backoff), under the same index
    os.kill(pids[1], signal.SIGKILL)

    def advance() -> None:
        clock.ms += 500
        sup.step()

    wait_for("the killed child's restart", lambda: len(sup.pids()) == 3 and pids[1] not in
             sup.pids(), tick=advance)  # fmt: skip
    assert sup.counts["restarts"] == 1 and not alive(pids[1])
    assert child_env(sup.pids()[1])["LAGPILOT_WORKER_INDEX"] == "1"

    # the lease (60 s since the hint was read) ends: one step down per 10 s, the newest first
    newest = sup.pids()[-1]
    clock.ms = T0_MS + 60_000
    sup.step()
    assert sup.replicas == 2
    wait_for("the newest child to stop on SIGTERM", lambda: not alive(newest))
    clock.ms += 9_000
    sup.step()
    assert sup.replicas == 2
    clock.ms += 1_000
    sup.step()
    assert sup.replicas == 1
    clock.ms += 60_000
    sup.step()
    assert sup.replicas == 1  # --min
    assert [e["replicas"] for _, e in sink.sent if e["event"] == "worker_outcome"] == [3, 2, 1]

    last = sup.pids()
    sup.shutdown()
    assert sup.pids() == [] and not any(alive(p) for p in [*pids, *last])


def test_unverified_and_foreign_actions_start_nothing(make: Any) -> None:
    sup, source, sink, _ = make(lo=0, hi=3)
    unsigned = {k: v for k, v in action(3).items() if k != "signature"}
    source.queue += [encode(e) for e in (
        unsigned, {**action(3), "signature": "0" * 64}, action(3, key=b"not-the-trusted-key-0123"),
        action(3, group="crawlers"), action(3, mode="recommend"), action(3, now_ms=T0_MS - 60_000),
    )]  # fmt: skip
    sup.step()
    assert sup.replicas == 0 and sup.pids() == [] and sink.sent == []
    assert sup.counts == {"schema": 1, "bad_signature": 2, "other_group": 1, "recommend": 1,
                          "expired": 1}  # fmt: skip
    good = encode(action(1))
    source.queue += [good, good]  # published twice: obeyed once
    sup.step()
    assert sup.replicas == 1 and sup.counts["accepted"] == 1 and sup.counts["duplicate"] == 1


def test_a_child_that_ignores_sigterm_is_killed_after_the_grace(make: Any, tmp_path: Path) -> None:
    ready = tmp_path / "ready"
    stubborn = [sys.executable, "-c", "import pathlib, signal, time; "
                "signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                f"pathlib.Path({str(ready)!r}).touch(); time.sleep(600)"]  # fmt: skip
    sup, _, _, _ = make(cmd=stubborn, lo=1, hi=1, grace_s=0.5)
    sup.step()
    wait_for("the child to ignore SIGTERM", ready.exists)
    (pid,) = sup.pids()
    started = time.monotonic()
    sup.shutdown()
    assert time.monotonic() - started >= 0.5  # it waited the grace, then SIGKILL
    assert not alive(pid)


def test_the_command_line_refuses_what_it_cannot_run(capsys: pytest.CaptureFixture[str]) -> None:
    main = sv.main
    assert main(["--group", "g", "--max", "2"]) == 64  # no CMD
    assert "put it after --" in capsys.readouterr().err
    assert main(["--group", "g", "--", "true"]) == 78  # no --max
    assert "--max (LAGPILOT_WORKERS_MAX) is not set" in capsys.readouterr().err
    assert main(["--group", "g", "--max", "1", "--min", "2", "--", "true"]) == 78
    assert main(["--group", "g", "--max", "2", "--", "no-such-program-x"]) == 64
    assert "no-such-program-x" in capsys.readouterr().err
