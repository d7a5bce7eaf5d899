"""Kafka's remote-storage quotas and retry backoff: RateQuota (the one rate limiter of copies and
fetches) and ExponentialBackoff/RetrySchedule, unit-tested with a fake clock, and the copy and
fetch quotas of a real RemoteLogManager over the ``faultfs://`` tier.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.fault_fs import fault_storage

from tierlog import Record
from tierlog.config import LONG_MAX
from tierlog.errors import RemoteFetchQuotaExceededError, RetriableError
from tierlog.manager.log_manager import LogManager
from tierlog.remote.rlm.backoff import ExponentialBackoff, RetrySchedule
from tierlog.remote.rlm.quota import RateQuota

T0 = 1_700_000_000_000


class Clock:
    def __init__(self) -> None:
        self.now = float(T0)

    def __call__(self) -> float:
        return self.now


# -- RateQuota -----------------------------------------------------------------------------


def test_unlimited_quota_never_throttles() -> None:
    quota = RateQuota(LONG_MAX, time_ms=Clock())
    for _ in range(100):
        assert quota.try_acquire(1 << 40) == 0
    assert not quota.is_exceeded()


def test_rate_counts_at_least_the_full_windows_and_throttle_is_kafkas_formula() -> None:
    clock = Clock()
    quota = RateQuota(100, window_num=11, window_size_s=1, time_ms=clock)
    quota.record(2000)
    # Fresh: the elapsed time counts as 10 whole windows, so the rate is 2000 B / 10 s.
    assert quota.rate() == pytest.approx(200.0)
    # Kafka: (rate - bound) / bound * window = (200 - 100) / 100 * 10 000 ms.
    assert quota.throttle_time_ms() == pytest.approx(10_000.0)
    clock.now += 5_000
    assert quota.throttle_time_ms() == pytest.approx(10_000.0)  # still 10 whole windows
    clock.now += 6_000  # 11 s: the sample expired
    assert quota.throttle_time_ms() == 0
    assert quota.rate() == 0


def test_check_and_record_are_atomic_so_concurrent_copies_cannot_all_start() -> None:
    """Kafka's race fix: with the quota free, of 16 copy threads asking at the same instant
    exactly one records its segment and starts; the others see the quota exceeded."""
    quota = RateQuota(1000, time_ms=Clock())
    barrier = threading.Barrier(16)

    def ask() -> float:
        barrier.wait(5)
        return quota.try_acquire(1 << 20)

    with ThreadPoolExecutor(16) as pool:
        throttles = list(pool.map(lambda _: ask(), range(16)))
    assert sum(1 for t in throttles if t == 0) == 1
    assert quota.rate() == pytest.approx((1 << 20) / 10)


def test_acquire_waits_while_exceeded_and_counts_the_throttle_time() -> None:
    clock = Clock()
    waits: list[float] = []

    def sleep(seconds: float, wake: threading.Event) -> None:
        waits.append(seconds)
        clock.now += seconds * 1000

    quota = RateQuota(1000, window_num=11, window_size_s=1, time_ms=clock, sleep=sleep)
    assert quota.acquire(20_000) and not waits  # the first copy goes at once
    assert quota.acquire(20_000)
    assert waits and quota.throttled_count == len(waits)
    assert quota.throttle_time_ms_total == pytest.approx(sum(waits) * 1000)
    assert quota.rate() <= 1000 * 1.1 + 20_000 / 10


def test_acquire_gives_up_when_cancelled_or_closed() -> None:
    quota = RateQuota(1, time_ms=Clock(), sleep=lambda s, wake: wake.wait(5))
    assert quota.acquire(1000)
    cancelled = threading.Event()
    cancelled.set()
    assert not quota.acquire(1000, cancelled)
    with ThreadPoolExecutor(1) as pool:
        waiter = pool.submit(quota.acquire, 1000)
        quota.close()
        assert waiter.result(5) is False


@settings(max_examples=200, deadline=None)
@given(bound=st.integers(100, 10_000), window_num=st.integers(2, 12),
       steps=st.lists(st.tuples(st.integers(0, 3000), st.integers(1, 5000)), min_size=1,
                      max_size=120))
def test_bytes_granted_over_any_span_stay_within_the_quota(bound: int, window_num: int,
                                                           steps: list[tuple[int, int]]) -> None:
    """Property: whatever the arrival pattern, the bytes granted in any span of the measured
    window stay within bound x (window_num x window) plus the one grant that crossed it."""
    clock = Clock()
    quota = RateQuota(bound, window_num=window_num, window_size_s=1, time_ms=clock)
    granted: list[tuple[float, int]] = []
    for advance, amount in steps:
        clock.now += advance
        if quota.try_acquire(amount) == 0:
            granted.append((clock.now, amount))
    span = (window_num - 1) * 1000
    biggest = max(a for _, a in steps)
    for i, (start, _) in enumerate(granted):
        in_span = sum(a for t, a in granted[i:] if t - start < span)
        assert in_span <= bound * window_num + biggest


def _saturate(quota: RateQuota, clock: Clock, arrivals: list[tuple[int, int, int]],
              until_ms: float) -> tuple[list[tuple[float, int]], int]:
    """Drive ``quota`` as copy threads would, on the fake clock: ``arrivals`` are (thread,
    gap ms after that thread's previous grant, bytes), repeated until ``until_ms``. A thread
    asks when its request arrives and, refused, asks again exactly when the quota said (the
    computed wait). Returns the grants (time, bytes) and the number of refusals."""
    threads = sorted({t for t, _, _ in arrivals})
    queues = {t: [(g, n) for th, g, n in arrivals if th == t] for t in threads}
    cursor = dict.fromkeys(threads, 0)
    wake = {t: clock.now + queues[t][0][0] for t in threads}
    grants: list[tuple[float, int]] = []
    refusals = 0
    while True:
        thread = min(threads, key=lambda t: wake[t])
        if wake[thread] > until_ms:
            return grants, refusals
        clock.now = max(clock.now, wake[thread])
        queue = queues[thread]
        _, amount = queue[cursor[thread] % len(queue)]
        wait = quota.try_acquire(amount)
        if wait > 0:
            refusals += 1
            wake[thread] = clock.now + wait
            continue
        grants.append((clock.now, amount))
        cursor[thread] += 1
        wake[thread] = clock.now + queue[cursor[thread] % len(queue)][0]


def _span_sums(grants: list[tuple[float, int]], span: float) -> list[tuple[float, int, int]]:
    """(start, bytes, grants) of every interval [start, start + span) that starts at a grant
    (the heaviest and the lightest intervals within the run all start at one)."""
    out = []
    end, carried = 0, 0
    for i, (start, amount) in enumerate(grants):
        while end < len(grants) and grants[end][0] < start + span:
            carried += grants[end][1]
            end += 1
        if i == 0 or grants[i - 1][0] < start:  # grants made at one instant start together
            out.append((start, carried, end - i))
        carried -= amount
    return out


@settings(max_examples=150, deadline=None)
@given(bound=st.integers(100, 100_000), window_num=st.integers(1, 12),
       window_s=st.integers(1, 3),
       arrivals=st.lists(st.tuples(st.integers(0, 3), st.integers(0, 4000),
                                   st.floats(0.005, 1.5)), min_size=1, max_size=40))
def test_no_span_ever_carries_more_than_its_budget(
        bound: int, window_num: int, window_s: int,
        arrivals: list[tuple[int, int, float]]) -> None:
    """Property (the quota's guarantee): whatever the request sizes, arrival times and number
    of threads, every interval of (window_num - 1) windows carries at most bound x that span,
    except an interval holding one oversize request (larger than the whole budget) alone."""
    clock = Clock()
    quota = RateQuota(bound, window_num=window_num, window_size_s=window_s, time_ms=clock)
    span = quota.span_ms
    # Sizes are fractions of the span's budget (some larger than all of it).
    sized = [(t, gap, max(1, int(f * quota.span_budget))) for t, gap, f in arrivals]
    grants, _ = _saturate(quota, clock, sized, clock.now + 4 * span)
    assert grants
    for start, carried, count in _span_sums(grants, span):
        oversize_alone = count == 1 and carried > quota.span_budget
        assert carried <= quota.span_budget + 1e-6 or oversize_alone, (start - T0, carried)


@settings(max_examples=100, deadline=None)
@given(bound=st.integers(1000, 1_000_000), window_num=st.integers(2, 12),
       threads=st.integers(1, 4), fraction=st.floats(0.005, 0.1), seed=st.integers(0, 2**16))
def test_a_saturating_load_is_paced_at_the_rate_from_the_start(bound: int, window_num: int,
                                                               threads: int, fraction: float,
                                                               seed: int) -> None:
    """Under a saturating load (every thread always asking) the idle quota lets only one
    window's worth through at once (not the span's whole budget), and after the first span
    every span carries the budget less at most two requests; each grant costs a thread at
    most one computed wait per competing thread (no polling)."""
    import random
    rng = random.Random(seed)
    clock = Clock()
    quota = RateQuota(bound, window_num=window_num, window_size_s=1, time_ms=clock)
    biggest = max(1, int(quota.span_budget * fraction))
    arrivals = [(t, 0, rng.randint(1, biggest)) for t in range(threads) for _ in range(20)]
    grants, refusals = _saturate(quota, clock, arrivals, T0 + 5 * quota.span_ms)
    at_once = sum(n for t, n in grants if t == T0)
    assert at_once <= quota.burst + biggest
    assert refusals <= len(grants) * threads
    last = grants[-1][0]
    for start, carried, _ in _span_sums(grants, quota.span_ms):
        assert carried <= quota.span_budget + 1e-6
        if T0 + quota.span_ms <= start and start + quota.span_ms <= last:
            assert carried >= quota.span_budget - 2 * biggest, (start - T0, carried)


def test_an_oversize_request_waits_for_an_empty_span_then_goes_alone() -> None:
    clock = Clock()
    quota = RateQuota(100, window_num=11, window_size_s=1, time_ms=clock)  # span budget 1000
    assert quota.try_acquire(10) == 0
    wait = quota.try_acquire(5000)  # larger than the span's budget: only into an empty span
    assert wait == pytest.approx(10_000, abs=1)
    clock.now += wait
    assert quota.try_acquire(5000) == 0
    # It left the bucket 4900 bytes in debt: the next grant waits it out at 100 B/s.
    assert quota.try_acquire(1) == pytest.approx((4900 + 1) * 10, abs=1)


# -- ExponentialBackoff ----------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(initial=st.integers(1, 5000), max_ms=st.integers(1, 100_000),
       jitter=st.floats(0, 0.5), attempts=st.integers(0, 60), r=st.floats(0, 0.999))
def test_backoff_is_kafkas_exponential_with_jitter_and_cap(initial: int, max_ms: int,
                                                           jitter: float, attempts: int,
                                                           r: float) -> None:
    backoff = ExponentialBackoff(initial, 2, max_ms, jitter, rng=lambda: r)
    value = backoff.backoff_ms(attempts)
    assert 0 <= value <= max(max_ms, min(initial, max_ms))
    if max_ms > initial:
        term = min(initial * 2.0 ** attempts, max_ms)
        assert value >= min(int(term * (1 - jitter)) - 1, max_ms)
        assert value <= int(term * (1 + jitter)) + 1


def test_backoff_defaults_double_from_500_ms_to_30_s() -> None:
    backoff = ExponentialBackoff(500, 2, 30_000, 0.0)
    assert [backoff.backoff_ms(a) for a in range(8)] == [
        500, 1000, 2000, 4000, 8000, 16000, 30000, 30000]


def test_retry_schedule_skips_a_failing_key_until_its_backoff_passed() -> None:
    schedule: RetrySchedule[str] = RetrySchedule(ExponentialBackoff(500, 2, 30_000, 0.0))
    assert schedule.due("p0", T0)
    assert schedule.failed("p0", T0) == T0 + 500
    assert not schedule.due("p0", T0 + 499) and schedule.due("p0", T0 + 500)
    assert schedule.failed("p0", T0 + 500) == T0 + 1500
    assert schedule.attempts("p0") == 2
    schedule.succeeded("p0")
    assert schedule.due("p0", T0) and schedule.attempts("p0") == 0


# -- the quotas of a RemoteLogManager ------------------------------------------------------


def _manager(tmp_path, clock, **extra):
    config = {"segment.bytes": 4096, "remote.storage.enable": True,
              "remote.storage.manager": "fsspec",
              "remote.storage.url": f"faultfs://{tmp_path}/tier",
              "local.retention.bytes": 0, "remote.fetch.max.wait.ms": 10_000, **extra}
    return LogManager.open(tmp_path / "data", config, time_ms=clock, start_scheduler=False)


def _fill(log, batches: int) -> None:
    for i in range(batches):
        log.append_records([Record(key=b"k%d" % i, value=b"v" * 500)])


def test_copies_wait_for_the_copy_quota(tmp_path, clock) -> None:
    """copy.max.bytes.per.second: the first segment is copied at once, the next ones wait
    (their simulated waits recorded as throttle time) so the rate stays at the quota."""
    with fault_storage() as faults, _manager(
            tmp_path, clock, **{"remote.log.manager.copy.max.bytes.per.second": 1000}) as mgr:
        log = mgr.create_topic("orders", 1)[0]
        _fill(log, 40)
        rlm = mgr._remote.manager()
        sizes = [s.size for s in list(log.segments.values())[:-1]]
        waits: list[float] = []

        def simulated_sleep(seconds: float, wake: threading.Event) -> None:
            waits.append(seconds)
            clock.advance(int(seconds * 1000) + 1)

        rlm.copy_quota._sleep = simulated_sleep
        started = clock()
        result = mgr.tier_now()["orders-0"]
        assert not result.errors and len(result.copied) == len(sizes) >= 3
        assert waits and rlm.copy_quota.throttle_time_ms_total > 0
        elapsed_s = (clock() - started) / 1000
        # All but what the first 10 windows let through at once went at <= 1000 B/s.
        assert sum(sizes) - 1000 * 10 - sizes[-1] <= 1000 * elapsed_s * 1.1
        assert faults.calls["put_file"] >= len(sizes)


def test_copy_quota_lets_one_of_several_concurrent_copies_start(tmp_path, clock) -> None:
    """Four partitions, four copy threads, the quota free: one copy records its segment and
    starts, the other three wait on the quota (none started before usage was counted)."""
    with fault_storage() as faults, _manager(
            tmp_path, clock, **{"remote.log.manager.copy.max.bytes.per.second": 10,
                                "remote.log.manager.thread.pool.size": 4}) as mgr:
        logs = mgr.create_topic("orders", 4)
        for log in logs:
            _fill(log, 10)
        rlm = mgr._remote.manager()
        waiting = threading.Semaphore(0)
        gate = threading.Event()

        def blocked_sleep(seconds: float, wake: threading.Event) -> None:
            waiting.release()
            gate.wait(10)

        rlm.copy_quota._sleep = blocked_sleep
        puts_before = faults.calls["put_file"]
        rlm.submit_tiering(logs)
        for _ in range(3):
            assert waiting.acquire(timeout=10), "three copies should wait on the quota"
        started_puts = faults.calls["put_file"] - puts_before
        rlm.copy_quota.close()  # the waiters give up: their copies are not started
        gate.set()
        assert rlm.await_tiering(10)
        copied = sum(1 for log in logs if log.highest_offset_in_remote >= 0)
        assert copied == 1
        assert started_puts <= 5  # the one segment's objects (.log + indexes)


def test_reads_over_the_fetch_quota_are_refused_with_a_retriable_error(tmp_path, clock) -> None:
    with fault_storage(), _manager(
            tmp_path, clock, **{"remote.log.manager.fetch.max.bytes.per.second": 100}) as mgr:
        log = mgr.create_topic("orders", 1)[0]
        _fill(log, 40)
        mgr.tier_now()
        assert log.local_log_start_offset > 0
        first = log.read(0, 4096)  # the quota is free: the read goes and is counted
        assert first.from_remote and first.size_in_bytes > 100 * 10
        with pytest.raises(RemoteFetchQuotaExceededError, match=r"orders-0.*offset 0") as err:
            log.read(0, 4096)
        assert isinstance(err.value, RetriableError) and err.value.throttle_time_ms > 0
        clock.advance(err.value.throttle_time_ms + 11_000)
        assert log.read(0, 4096).from_remote
