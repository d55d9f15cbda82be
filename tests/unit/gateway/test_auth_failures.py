"""gateway.auth.FailedLookups: failed key lookups per client address, in one-minute windows
on a clock the test moves (it starts on a minute boundary, tests.support.clock.START_S)."""

from __future__ import annotations

from gateway.auth import MAX_ADDRESSES, FailedLookups


def test_an_address_may_fail_the_limit_then_waits_for_the_rest_of_the_window(clock):
    failures = FailedLookups(3, clock=clock)
    clock.at(20.5)

    for _ in range(2):
        failures.failed("10.0.0.1")
    assert failures.retry_after_s("10.0.0.1") is None
    failures.failed("10.0.0.1")

    assert failures.retry_after_s("10.0.0.1") == 40  # ceil(60 - 20.5)
    assert failures.retry_after_s("10.0.0.2") is None  # another address has its own budget


def test_a_new_window_forgets_every_count(clock):
    failures = FailedLookups(1, clock=clock)
    clock.at(59.9)
    failures.failed("10.0.0.1")
    assert failures.retry_after_s("10.0.0.1") == 1

    clock.at(60.0)

    assert failures.retry_after_s("10.0.0.1") is None


def test_windows_start_at_the_rate_epoch(clock):
    failures = FailedLookups(1, clock=clock, epoch_s=30)  # windows run from :30 to :30
    clock.at(29.0)
    failures.failed("10.0.0.1")
    assert failures.retry_after_s("10.0.0.1") == 1

    clock.at(30.0)
    assert failures.retry_after_s("10.0.0.1") is None
    failures.failed("10.0.0.1")
    clock.at(60.0)
    assert failures.retry_after_s("10.0.0.1") == 30


def test_zero_turns_the_limit_off(clock):
    failures = FailedLookups(0, clock=clock)

    for _ in range(1000):
        failures.failed("10.0.0.1")

    assert failures.retry_after_s("10.0.0.1") is None


def test_addresses_past_the_cap_share_one_budget(clock):
    failures = FailedLookups(2, clock=clock)
    clock.at(20.0)
    for n in range(MAX_ADDRESSES):
        failures.failed(f"address-{n}")

    failures.failed("late-1")
    failures.failed("late-2")

    assert failures.retry_after_s("late-3") == 40  # its first lookup: the shared budget is spent
    assert failures.retry_after_s("address-0") is None  # addresses seen in time keep their own
