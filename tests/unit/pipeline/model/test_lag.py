"""The lag model (``pipeline.model.lag``: samples, the tick, status, state) against scripted
producers and consumers, with exact known truths; what commits alone change is in
``test_commit_state.py``."""

from __future__ import annotations

import numpy as np
import pytest
from support.lag_oracle import partition_lag, summary

from pipeline.model.arrays import decode
from pipeline.model.config import LagConfig
from pipeline.model.history import SOURCE_NAMES
from pipeline.model.lag import TopicModel, drain_eta_s
from schemas import LagStatus, to_dict, validate

CFG = LagConfig()
TICK_MS = 250


class Script:
    """A producer at ``produce_per_s`` and a consumer committing every ``commit_every_ms``
    at ``consume_per_s`` (capped by what exists), sampled every 250 ms."""

    def __init__(self, produce_per_s: float, consume_per_s: float, commit_every_ms: int = 100):
        self.produce_per_s = produce_per_s
        self.consume_per_s = consume_per_s
        self.commit_every_ms = commit_every_ms
        self.model = TopicModel("t", CFG)
        self.t0 = 1_000_000
        self.consumed = 0.0
        self.produced = 0.0
        self.last_ms = self.t0

    def hwm(self) -> int:
        return int(self.produced + 1e-9)

    def run(self, until_ms: int, consuming: bool = True) -> list:
        obs = []
        t = self.last_ms
        while t < until_ms:
            t += 50
            self.produced += self.produce_per_s * 0.05  # the rate may change mid-run
            if consuming:
                self.consumed = min(self.consumed + self.consume_per_s * 0.05, self.hwm())
            if consuming and (t - self.t0) % self.commit_every_ms == 0:
                self.model.commit("g", 0, int(self.consumed), t)
            if (t - self.t0) % TICK_MS == 0:
                self.model.add_sample(t, [self.hwm()])
                obs.append(self.model.observe(t))
        self.last_ms = t
        return obs


def test_caught_up_consumer_is_ok_with_zero_time_lag():
    s = Script(produce_per_s=1000, consume_per_s=5000)
    obs = s.run(s.t0 + 20_000)
    last = obs[-1][0]
    assert last.lag[0] <= 100  # at most one commit interval of messages
    assert last.time_lag_s[0] < 0.35
    assert LagStatus(list(LagStatus)[last.status[0]]) is LagStatus.OK


def test_lag_rate_matches_the_scripted_deficit_within_10_percent():
    s = Script(produce_per_s=1000, consume_per_s=600)
    obs = s.run(s.t0 + 20_000)
    rate = obs[-1][0].lag_rate_per_s[0]
    assert rate == pytest.approx(400, rel=0.10)
    assert obs[-1][0].produce_rate_per_s[0] == pytest.approx(1000, rel=0.05)
    assert obs[-1][0].consume_rate_per_s[0] == pytest.approx(600, rel=0.10)


def test_time_lag_within_250_ms_of_the_truth():
    s = Script(produce_per_s=1000, consume_per_s=600)
    obs = s.run(s.t0 + 20_000)
    o = obs[-1][0]
    c = int(o.committed[0])
    # truth: the message at offset c was produced at t0 + (c + 1) / rate
    truth_s = (o.now_ms - (s.t0 + (c + 1) * 1000 / s.produce_per_s)) / 1000
    assert abs(o.time_lag_s[0] - truth_s) < 0.25
    assert o.time_lag_s[0] > 5  # really behind


def test_acceleration_seen_when_the_deficit_grows():
    s = Script(produce_per_s=1000, consume_per_s=1000)
    s.run(s.t0 + 10_000)
    s.consume_per_s = 0.0
    s.produce_per_s = 1000.0
    obs = s.run(s.t0 + 13_000, consuming=True)
    assert obs[-1][0].lag_accel_per_s2[0] > 0


def test_stopped_consumer_is_stop_within_one_second_without_more_commits():
    s = Script(produce_per_s=1000, consume_per_s=2000, commit_every_ms=100)
    s.run(s.t0 + 10_000)
    stopped_at = s.last_ms
    obs = s.run(stopped_at + 3_000, consuming=False)
    first_stop = next(o[0].now_ms for o in obs if list(LagStatus)[o[0].status[0]] is LagStatus.STOP)
    assert first_stop - stopped_at <= 1000
    first_non_ok = next(o[0].now_ms for o in obs if o[0].status[0] != 0)
    assert first_non_ok - stopped_at <= 500


def test_idle_topic_with_caught_up_group_stays_ok_for_minutes():
    m = TopicModel("t", CFG)
    m.commit("g", 0, 500, 1_000)
    for i in range(1, 4 * 60 * 5):  # five minutes at 4 Hz, no new data, no commits
        m.add_sample(1_000 + i * 250, [500])
        (o,) = m.observe(1_000 + i * 250)
        assert o.status[0] == 0 and o.time_lag_s[0] == 0.0 and o.lag[0] == 0


def test_rewind_on_offset_reset_then_back_to_normal():
    m = TopicModel("t", CFG)
    m.commit("g", 0, 900, 1_000)
    m.add_sample(1_100, [900])
    m.commit("g", 0, 100, 1_200)  # offsets reset to an earlier position
    m.add_sample(1_350, [900])
    (o,) = m.observe(1_350)
    assert list(LagStatus)[o.status[0]] is LagStatus.REWIND


def test_stall_when_commits_continue_but_offset_is_stuck():
    m = TopicModel("t", CFG)
    # never progressed, so no cadence is learned: judged by the default (5 s, Kafka's
    # auto-commit interval), STALL once nothing moved for 4 x that
    for i in range(90):
        t = 1_000 + i * 250
        m.commit("g", 0, 10, t)  # commits every tick, always the same offset
        m.add_sample(t, [10 + i * 10])
        (o,) = m.observe(t)
    assert list(LagStatus)[o.status[0]] is LagStatus.STALL


def test_replayed_commit_and_sample_change_nothing():
    m = TopicModel("t", CFG)
    m.commit("g", 0, 100, 2_000)
    m.commit("g", 0, 50, 1_000)  # an older record replayed after a restart
    assert m.committed[0, 0] == 100
    assert m.add_sample(3_000, [200])
    assert not m.add_sample(3_000, [200])
    assert not m.add_sample(2_500, [150])


def test_history_is_bounded_and_keeps_the_window_and_the_oldest_row():
    cfg = LagConfig(history_rows=64, window_s=2.0)
    m = TopicModel("t", cfg)
    for i in range(2_000):
        m.add_sample(1_000 + i * 250, [i * 10])
    assert len(m.t_ms) <= 64  # the cap holds even where the bound would need more rows
    assert m.t_ms[0] == 1_000  # still reaches back to the start, thinned
    window_rows = (m.t_ms >= m.t_ms[-1] - 2_000).sum()
    assert window_rows == 9  # every sample of the last 2 s is kept


def test_a_read_record_timestamp_is_the_time_lag_until_the_group_moves():
    m = TopicModel("t", CFG)
    m.commit("g", 0, 10, 1_000)
    m.add_sample(1_000, [50])  # offset 10 is older than the history: extrapolated
    m.add_sample(1_250, [60])
    (o,) = m.observe(1_250)
    assert SOURCE_NAMES[o.time_lag_source[0]] == "extrapolated"
    m.record_read("g", 0, 10, record_ms=-500_000)  # ignored: not a timestamp
    m.record_read("nobody", 0, 10, record_ms=700)  # ignored: unknown group
    (o,) = m.observe(1_250)
    assert SOURCE_NAMES[o.time_lag_source[0]] == "extrapolated"
    m.record_read("g", 0, 10, record_ms=700)
    (o,) = m.observe(1_250)
    assert SOURCE_NAMES[o.time_lag_source[0]] == "read"
    assert o.time_lag_s[0] == pytest.approx(0.55)
    assert partition_lag(o, 0).time_lag_source == "read"
    m.commit("g", 0, 55, 1_400)  # moved: the read no longer applies
    m.add_sample(1_500, [70])
    (o,) = m.observe(1_500)
    assert SOURCE_NAMES[o.time_lag_source[0]] == "interpolated"
    m.commit("g", 0, 70, 1_600)
    m.add_sample(1_750, [70])
    (o,) = m.observe(1_750)
    assert SOURCE_NAMES[o.time_lag_source[0]] == "caught_up" and o.time_lag_s[0] == 0


def test_new_partitions_widen_the_model():
    m = TopicModel("t", CFG)
    m.commit("g", 0, 5, 1_000)
    m.add_sample(1_000, [5])
    m.commit("g", 2, 1, 1_100)
    m.add_sample(1_250, [5, 0, 3])
    (o,) = m.observe(1_250)
    assert list(o.partitions) == [0, 2]
    assert list(o.lag) == [0, 2]


def test_history_persisted_in_two_parts_restores_whole():
    m = TopicModel("t", CFG)
    for i in range(400):  # compacted along the way
        m.add_sample(1_000 + i * 250, [i * 3, i])
    first = m.history_state(100_000)
    assert set(first) == {"hwold", "hw"}  # the first write is whole
    for i in range(400, 480):
        m.add_sample(1_000 + i * 250, [i * 3, i, 5])  # and a partition appears
    later = m.history_state(110_000)
    assert set(later) == {"hw"}  # within 30 s: only the rows since
    assert len(decode(later["hw"]["t_ms"])) < len(m.t_ms) // 2
    m2 = TopicModel("t", CFG)
    m2.load_hw_state(later["hw"], first["hwold"])
    # every row in memory is restored (the old part may hold rows compacted since)
    assert np.isin(m.t_ms, m2.t_ms).all() and m2.t_ms[-1] == m.t_ms[-1]
    assert np.array_equal(m2.hw[np.isin(m2.t_ms, m.t_ms)], m.hw)
    assert "hwold" in m.history_state(140_000)


def test_model_state_round_trips_and_the_restored_model_observes_the_same():
    s = Script(produce_per_s=1000, consume_per_s=600)
    s.run(s.t0 + 5_000)
    m = s.model
    m.commit("h", 0, 7, s.last_ms - 100)  # a second group, younger than the window
    m2 = TopicModel("t", CFG)
    m2.load_hw_state(m.hw_state())
    for name in m.groups:
        m2.load_position_state(name, m.position_state(name))
    m2.load_window_state(m.window_state())
    for k in ("t_ms", "hw", "committed", "commit_ms", "progress_ms", "w_t", "w_hw", "w_c"):
        assert np.array_equal(getattr(m, k), getattr(m2, k)), k
    assert np.array_equal(m.interval_s, m2.interval_s, equal_nan=True)
    s.model.add_sample(s.last_ms + 250, [s.hwm()])
    m2.add_sample(s.last_ms + 250, [s.hwm()])
    a, b = m.observe(s.last_ms + 250), m2.observe(s.last_ms + 250)
    for k in ("lag", "lag_rate_per_s", "lag_accel_per_s2", "time_lag_s", "status"):
        assert np.array_equal(getattr(a, k), getattr(b, k)), k


def test_outputs_validate_against_their_schemas():
    s = Script(produce_per_s=1000, consume_per_s=600)
    (o,) = s.run(s.t0 + 5_000)[-1]
    validate(to_dict(partition_lag(o, 0)))
    validate(to_dict(summary(o, 5)))


def test_a_growing_lag_warns_before_the_time_lag_level():
    s = Script(produce_per_s=1000, consume_per_s=1000)
    s.run(s.t0 + 10_000)
    s.consume_per_s = 700.0  # still progressing, but falling behind
    obs = s.run(s.t0 + 13_000)
    o = obs[-1][0]
    assert o.time_lag_s[0] < CFG.warn_time_lag_s
    assert list(LagStatus)[o.status[0]] is LagStatus.WARN


def test_an_avalanche_warns_within_a_second_while_a_healthy_sawtooth_stays_ok():
    s = Script(produce_per_s=16, consume_per_s=400, commit_every_ms=200)
    obs = s.run(s.t0 + 15_000)
    assert all(o[0].status[0] == 0 for o in obs[-20:])  # healthy: commits every 200 ms
    onset = s.last_ms
    s.produce_per_s = 26.0  # heavy documents arrive...
    s.consume_per_s = 8.0  # ...and take 150 ms each
    obs = s.run(onset + 2_000)
    first = next(o[0].now_ms for o in obs if o[0].status[0] != 0)
    assert first - onset <= 1_000


def _groups_model(rates: dict[str, float], ticks: int = 60) -> dict[str, TopicModel]:
    """One model holding every group, and one model per group alone, fed the same inputs."""
    models = {"all": TopicModel("t", CFG), **{g: TopicModel("t", CFG) for g in rates}}
    consumed = dict.fromkeys(rates, 0.0)
    for i in range(1, ticks + 1):
        t = 1_000_000 + i * 250
        hw = [i * 250, i * 100, i * 10]
        for g, rate in rates.items():
            if i % 3 == 0:  # every 750 ms
                consumed[g] = min(consumed[g] + rate * 0.75, hw[0])
                for p in range(3 if g != "one" else 1):
                    for m in (models["all"], models[g]):
                        m.commit(g, p, min(int(consumed[g] * (p + 1) / 3), hw[p]), t - 20)
        for m in models.values():
            m.add_sample(t, hw)
            m.observe(t)
    return models


def test_a_group_is_modelled_the_same_alone_and_beside_other_groups():
    rates = {"fast": 2_000.0, "slow": 300.0, "one": 900.0}
    models = _groups_model(rates)
    now = models["all"].last_sample_ms + 250
    for m in models.values():
        m.add_sample(now, [9_999, 9_999, 9_999])  # a burst: every group falls behind
    together = models["all"].observe(now)
    for o in together:
        (alone,) = models[o.group].observe(now)
        assert list(o.partitions) == list(alone.partitions)
        for k in ("lag", "committed", "status", "time_lag_s"):
            assert np.array_equal(getattr(o, k), getattr(alone, k)), (o.group, k)
        for k in ("lag_rate_per_s", "lag_accel_per_s2", "consume_rate_per_s", "produce_rate_per_s"):
            assert np.allclose(getattr(o, k), getattr(alone, k), atol=1e-6), (o.group, k)
    assert {o.group for o in together} == set(rates)


def test_a_group_auto_committing_every_5_s_that_keeps_up_stays_ok():
    # Kafka's default auto-commit: the committed offset trails consumption by up to 5 s, so
    # the time lag saws up to ~5 s while the group keeps up: that is cadence, not lag
    s = Script(produce_per_s=100, consume_per_s=1_000, commit_every_ms=5_000)
    obs = s.run(s.t0 + 120_000)
    late = obs[len(obs) // 2 :]
    assert max(o[0].time_lag_s[0] for o in late) > 4.5  # the sawtooth is really there
    assert all(o[0].status[0] == 0 for o in late)


def test_a_group_committing_every_5_s_that_falls_behind_warns_then_errs():
    s = Script(produce_per_s=100, consume_per_s=1_000, commit_every_ms=5_000)
    s.run(s.t0 + 60_000)
    s.consume_per_s = 50.0  # half the produce rate: the lag grows 50 msgs/s
    obs = s.run(s.t0 + 180_000)
    statuses = [list(LagStatus)[o[0].status[0]] for o in obs]
    assert LagStatus.WARN in statuses[:120]  # within 30 s
    assert statuses[-1] is LagStatus.ERR  # 60 s behind by the end


def test_a_new_group_is_judged_by_the_default_cadence_until_its_own_is_learned():
    # a fresh pipeline meets a group committing every 5 s, 2 messages behind: no false
    # WARN/STOP while its cadence is unknown (the first commits), nor after
    m = TopicModel("t", CFG)
    statuses = set()
    for i in range(4 * 60):
        t = 1_000 + i * 250
        hw = 10 + i // 4  # 1 msg/s
        if i % 20 == 7:
            m.commit("g", 0, hw - 2, t)
        m.add_sample(t, [hw])
        obs = m.observe(t)
        statuses |= {int(s) for o in obs for s in o.status}
    assert statuses == {0}


def test_a_drain_eta_only_where_the_lag_clearly_drains() -> None:
    lag = np.array([[100, 100, 100, 100, 0, 10**6]])
    lag_rate = np.array([[-10.0, -1e-12, -0.5, 5.0, 0.0, -0.05]])
    produce = np.array([[100.0, 0.0, 100.0, 10.0, 5.0, 0.0]])
    eta = drain_eta_s(lag, lag_rate, produce)
    assert eta[0, 0] == pytest.approx(10.0)  # falls 10/s, 10 % of a 100/s inflow: draining
    assert np.isnan(eta[0, 1])  # a rounding error below zero: no ETA (was 1e14 s)
    assert np.isnan(eta[0, 2])  # falls 0.5/s under a 100/s inflow: 0.5 %, no drain yet
    assert np.isnan(eta[0, 3])  # grows
    assert eta[0, 4] == 0.0  # caught up
    assert np.isnan(eta[0, 5])  # 0.05 offsets/s on an idle topic: noise, not a drain
