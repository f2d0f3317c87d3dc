from bench.support.handled import judge


def test_a_repeat_is_a_duplicate_and_a_key_going_back_is_an_order_violation() -> None:
    got = judge([(0, "a", 0), (1_000_000_000, "a", 2), (2, "a", 1), (3, "b", 0), (4, "b", 0)])
    # by time: a0, a1 (t=2), b0, b0 again, a2 last: one duplicate, no violation
    assert (got.handled, got.duplicates, got.order_violations) == (4, 1, 0)
    assert got.lost(6) == 2 and got.records_per_s == 4.0  # 4 over the 1 s span
    late = judge([(0, "k", 1), (5, "k", 0)])
    assert late.order_violations == 1 and late.handled == 2
