"""The verdict never calls noise a winner, and always calls a real gap (live on this CPU, 20 repeats each)."""
import pytest

from profiling.explain import explain
from profiling.explain.verdict import ordered
from profiling.measurement import compare
from profiling.workload import Workload

REPEATS = 20


def ranked(comparison) -> str | None:
    a, b = comparison.a.timing, comparison.b.timing
    return "A" if ordered(a, b) else "B" if ordered(b, a) else None


def test_a_variant_against_itself_is_never_given_a_winner():
    w = Workload.cpu_default(seq_len=64, heads=1)
    orders = [ranked(compare("naive", "naive", w)) for _ in range(REPEATS)]
    assert orders == [None] * REPEATS


def test_a_real_large_gap_is_ranked_the_same_way_every_time():
    # naive writes two S×S matrices, flash's CPU kernel none: ~3.5x apart on a 2-core machine, a gap far wider
    # than the few-ms stalls a busy one adds
    w = Workload.cpu_default(seq_len=1024, heads=2)
    results = [explain(compare("naive", "sdpa_flash", w)) for _ in range(REPEATS)]
    assert [ranked(c) for c in results] == ["B"] * REPEATS
    assert all("faster than" in c.headline.title and "[B]" in c.headline.title.split("faster")[0]
               for c in results)


@pytest.mark.parametrize("samples, expected", [(30, None), (8, None), (5, None)])
def test_overlapping_samples_are_never_ordered_whatever_their_count(samples, expected):
    from profiling.results import Timing
    a = Timing.of([1.0 + 0.01 * (i % 7) for i in range(samples)], "perf_counter")
    b = Timing.of([1.0 + 0.01 * ((i + 3) % 7) for i in range(samples)], "perf_counter")
    assert (ordered(a, b) or ordered(b, a) or None) is expected
