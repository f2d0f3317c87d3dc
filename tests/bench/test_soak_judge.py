"""The soak's verdicts (``bench/support/soak_judge.py``): pure, no broker."""

from __future__ import annotations

from bench.support.soak_judge import (
    GRACE_S,
    Incident,
    StatusEvent,
    detection,
    false_alarms,
    rss_growth_pct,
    targets_met,
    verdict,
    windows,
)

A, B = ("g01", "t01", 3), ("g02", "t01", 3)


def _stall(at: float = 100.0, end: float = 145.0) -> Incident:
    return Incident("stall", at, end, frozenset({A}), {"group": "g01"})


def test_an_incident_is_detected_at_its_first_non_ok_status_and_recovers_when_all_are_ok():
    events = [
        StatusEvent(90.0, A, "OK"),
        StatusEvent(101.2, A, "WARN"),
        StatusEvent(104.0, A, "STALL"),
        StatusEvent(160.0, A, "OK"),
    ]
    actions = [{"_received": 102.0, "_about": "group:g01/topic:t01/3 {}", "type": "alert"}]
    v = verdict(_stall(), events, actions, recovered_by=300.0)
    assert v["detected"] and v["detected_after_s"] == 1.2
    assert v["action"] == "alert"
    assert v["recovered"] and v["recovered_after_end_s"] == 15.0


def test_an_incident_never_seen_is_missed_and_one_still_bad_is_not_recovered():
    assert not verdict(_stall(), [StatusEvent(90.0, A, "OK")], [], 300.0)["detected"]
    late = [StatusEvent(101.0, A, "WARN")]
    v = verdict(_stall(), late, [], 300.0)
    assert v["detected"] and not v["recovered"]


def test_a_non_ok_status_outside_every_incident_is_a_false_alarm():
    inc = _stall()
    events = [
        StatusEvent(101.0, A, "WARN"),  # the incident's
        StatusEvent(101.0, B, "WARN"),  # another group: false
        StatusEvent(145.0 + GRACE_S + 1, A, "WARN"),  # after the grace: false
        StatusEvent(50.0, A, "ERR"),  # before the injection: false
    ]
    assert [e.cell for e in false_alarms(events, [inc])] == [B, A, A]


def test_windows_shrink_for_short_runs_and_never_overlap():
    w = windows(3600, 300, 600)
    assert w == {"first": (300, 900), "last": (3000, 3600)}
    short = windows(90, 20, 600)
    assert short["first"][1] <= short["last"][0]


def test_rss_growth_compares_the_windows_medians():
    samples = [(t, 100 * 2**20) for t in range(0, 50, 10)] + [(t, 110 * 2**20) for t in (60, 70)]
    got = rss_growth_pct(samples, (0, 50), (60, 80))
    assert got["rss_growth_pct"] == 10.0
    assert rss_growth_pct([], (0, 1), (1, 2))["rss_growth_pct"] is None


def test_detection_p99_per_window_and_the_held_target():
    vs = [
        {"detected_after_s": 1.0, "injected_at": 1000.0 + 350},
        {"detected_after_s": 2.0, "injected_at": 1000.0 + 3100},
    ]
    got = detection(vs, 1000.0, windows(3600, 300, 600))
    assert got["detection_p99_first_s"] == 1.0 and got["detection_p99_last_s"] == 2.0
    assert got["detection_held"] is True  # 2.0 <= 1.0 x 1.5 + 0.5
    result = {"rss_growth_pct": 12.0, "false_alarms": 0, "missed_incidents": 0, **got}
    assert targets_met(result) == {
        "rss_growth": False,
        "false_alarms": True,
        "missed_incidents": True,
        "detection_p99_held": True,
    }


def test_the_pages_soak_section_comes_from_the_results_and_says_when_it_is_short():
    from bench.faults.doc import render_soak

    assert "Not run yet" in "\n".join(render_soak(None))
    soak = {
        "commit": "abc", "measured_at": "t", "minutes": 10, "commits_per_s": 20_000,
        "shape": {"topics": 20, "partitions": 50, "groups": 20, "progress_groups": 2},
        "rss_growth_pct": 1.5, "rss_first_mib": 400.0, "rss_last_mib": 406.0,
        "false_alarms": 0, "missed_incidents": 0, "incidents_injected": 1,
        "detection_p99_s": 1.2, "detection_p99_first_s": 1.2, "detection_p99_last_s": None,
        "targets_met": {"rss_growth": True},
        "incidents": [{"kind": "stall", "target": {"group": "g01"}, "detected_after_s": 1.2,
                       "action": None, "recovered": True, "recovered_after_end_s": 3.0}],
    }  # fmt: skip
    text = "\n".join(render_soak(soak))
    assert "1,000 partitions x 20 groups, 20,000 commits/s" in text
    assert "| 1.5 (400 / 406) | 0 | 0 of 1 | 1.2 / 1.2 / - |" in text
    assert "| stall | g01 | 1.2 | - | yes (3) |" in text
    assert "A 10-minute run, not the hour" in text
