"""Sign-in throttling's rules (accounts/throttle.py) on a clock the test moves, in this
process's memory and in real Redis alike."""

from __future__ import annotations

import logging
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from accounts import throttle, throttle_stores, throttle_subjects
from accounts.throttle import Throttle

NAME, OTHER = "alice", "bob"
HOME, AWAY = "203.0.113.7", "198.51.100.9"


@pytest.fixture
def gate(backend, clock, tag, tollgate) -> Throttle:
    tollgate(LOGIN_FAILURES=5, LOGIN_LOCKOUT_S=60, LOGIN_LOCKOUT_MAX_S=3600, PROXY_HOPS=0)
    return Throttle(clock=clock, prefix=f"tollgate:login:{tag}")


def fail(gate: Throttle, *, name: str = NAME, address: str = HOME) -> int:
    """One wrong password; return the lockout it caused (s), or -1 if it was refused."""
    attempt = gate.begin_sign_in(name=name, address=address)
    return -1 if attempt.wait_s else gate.failed(attempt)


def sign_in(gate: Throttle, *, name: str = NAME, address: str = HOME) -> int:
    """One right password; return 0, or the wait (s) it was refused for."""
    attempt = gate.begin_sign_in(name=name, address=address)
    if not attempt.wait_s:
        gate.succeeded(attempt)
    return attempt.wait_s


def test_the_fifth_failure_locks_the_name_and_the_right_password_waits(gate, clock):
    assert [fail(gate) for _ in range(5)] == [0, 0, 0, 0, 60]

    assert sign_in(gate) == 60
    clock.advance(59.5)
    assert sign_in(gate) == 1
    clock.advance(0.5)
    assert sign_in(gate) == 0


def test_each_further_lockout_doubles_up_to_the_cap(gate, clock, tollgate):
    tollgate(LOGIN_FAILURES=2, LOGIN_LOCKOUT_S=60, LOGIN_LOCKOUT_MAX_S=200)
    lockouts = []
    for _ in range(4):
        lockouts.append([fail(gate), fail(gate)][-1])
        clock.advance(lockouts[-1])
    assert lockouts == [60, 120, 200, 200]


def test_strikes_are_forgotten_a_day_after_the_last_lockout(gate, clock):
    assert [fail(gate) for _ in range(5)][-1] == 60
    clock.advance(60)
    assert [fail(gate) for _ in range(5)][-1] == 120
    clock.advance(throttle_stores.STRIKE_MEMORY_S)
    assert [fail(gate) for _ in range(5)][-1] == 60


def test_failures_older_than_the_window_do_not_count(gate, clock):
    assert [fail(gate) for _ in range(4)] == [0, 0, 0, 0]
    clock.advance(throttle_stores.FAILURE_WINDOW_S)
    assert [fail(gate) for _ in range(4)] == [0, 0, 0, 0]
    assert fail(gate) == 60


def test_a_success_clears_its_names_failures_and_only_its_own_count_of_the_address(gate):
    assert [fail(gate) for _ in range(4)] == [0, 0, 0, 0]
    assert sign_in(gate) == 0
    # The name starts over; the address still holds its 4 failures, and locks at the 5th.
    assert fail(gate, name=OTHER) == 60
    assert sign_in(gate, address=AWAY) == 0
    assert sign_in(gate) == 60


def test_many_names_from_one_address_lock_the_address(gate):
    assert [fail(gate, name=f"user-{i}") for i in range(5)] == [0, 0, 0, 0, 60]
    assert sign_in(gate, name="someone-else") == 60
    assert sign_in(gate, name="someone-else", address=AWAY) == 0


def test_one_name_from_many_addresses_locks_the_name(gate):
    assert [fail(gate, address=f"192.0.2.{i}") for i in range(5)] == [0, 0, 0, 0, 60]
    assert sign_in(gate, address=AWAY) == 60
    assert sign_in(gate, name=OTHER, address=AWAY) == 0


def test_concurrent_guesses_cannot_outrun_the_limit(gate):
    # 20 wrong passwords at once from 20 addresses: 5 are checked, the fifth failure locks
    # the name, and the 15 that waited for a slot find it locked.
    with ThreadPoolExecutor(20) as pool:
        lockouts = list(pool.map(lambda i: fail(gate, address=f"192.0.2.{i}"), range(20)))
    assert sorted(lockouts) == [-1] * 15 + [0] * 4 + [60]
    assert [(c.strikes, c.failures) for c in gate.unlock_name(NAME)] == [(1, 0)]


def test_right_passwords_in_flight_are_no_failures_and_all_get_through(gate):
    # 40 right passwords at once for 8 names behind one address: none refused, nothing left.
    names = [f"colleague-{i % 8}" for i in range(40)]
    with ThreadPoolExecutor(40) as pool:
        waits = list(pool.map(lambda name: sign_in(gate, name=name), names))
    assert waits == [0] * 40
    assert gate.unlock_address(HOME) == []


def test_an_attempt_beyond_the_free_slots_waits_for_one(gate):
    first = [gate.begin_sign_in(name=NAME, address=HOME) for _ in range(5)]
    assert [attempt.wait_s for attempt in first] == [0] * 5
    with ThreadPoolExecutor(1) as pool:
        sixth = pool.submit(gate.begin_sign_in, name=NAME, address=AWAY)
        time.sleep(0.3)
        assert not sixth.done()  # every slot is taken: it waits, it is not refused
        gate.succeeded(first[0])
        assert sixth.result(timeout=5).wait_s == 0
    for attempt in [*first[1:], sixth.result()]:
        gate.succeeded(attempt)
    assert [fail(gate) for _ in range(5)] == [0, 0, 0, 0, 60]


def test_guesses_in_flight_lock_the_right_password_that_waited_behind_them(gate):
    guesses = [gate.begin_sign_in(name=NAME, address=HOME) for _ in range(5)]
    with ThreadPoolExecutor(1) as pool:
        right = pool.submit(sign_in, gate, address=AWAY)
        time.sleep(0.2)
        assert [gate.failed(attempt) for attempt in guesses] == [0, 0, 0, 0, 60]
        assert right.result(timeout=5) == 60


def test_an_attempt_that_finds_no_slot_in_time_is_refused_as_busy_without_a_failure(gate):
    first = [gate.begin_token(address=HOME) for _ in range(5)]
    gate.slot_wait_s = 0.05
    refused = gate.begin_token(address=HOME)
    assert (refused.wait_s, refused.busy) == (throttle.BUSY_RETRY_S, True)
    assert throttle_subjects.token_refusal(refused.wait_s, busy=True) == (
        "Too many tenant tokens from this address are being checked at once. Try again in 1 second."
    )
    gate.failed(refused)  # a refused attempt counts nothing
    for attempt in first:
        gate.succeeded(attempt)
    assert [gate.failed(gate.begin_token(address=HOME)) for _ in range(5)] == [0, 0, 0, 0, 60]


def test_the_slot_of_an_attempt_that_never_ended_is_free_after_its_lease(gate, clock):
    crashed = [gate.begin_sign_in(name=NAME, address=HOME) for _ in range(5)]
    assert all(attempt.wait_s == 0 for attempt in crashed)
    clock.advance(throttle_stores.IN_FLIGHT_LEASE_S)
    assert sign_in(gate) == 0


def test_a_server_error_gives_the_attempt_back_uncounted(gate):
    assert [fail(gate) for _ in range(4)] == [0, 0, 0, 0]
    for _ in range(10):  # the database unreachable: neither a failure nor a success
        attempt = gate.begin_sign_in(name=NAME, address=HOME)
        assert attempt.wait_s == 0
        gate.released(attempt)
    # The name's 4 failures stand (a success would have cleared them): the 5th locks.
    assert fail(gate) == 60


def test_sign_ins_and_tenant_tokens_count_apart_per_address(gate):
    for _ in range(4):
        gate.failed(gate.begin_token(address=HOME))
    assert gate.failed(gate.begin_token(address=HOME)) == 60
    assert gate.begin_token(address=HOME).wait_s == 60
    assert sign_in(gate) == 0
    assert [fail(gate, name=f"user-{i}", address=AWAY) for i in range(5)][-1] == 60
    assert gate.begin_token(address=AWAY).wait_s == 0


def test_a_valid_token_counts_nothing(gate):
    for _ in range(4):
        gate.failed(gate.begin_token(address=HOME))
    for _ in range(10):
        attempt = gate.begin_token(address=HOME)
        assert attempt.wait_s == 0
        gate.succeeded(attempt)
    assert gate.failed(gate.begin_token(address=HOME)) == 60


def admin_sign_in(gate: Throttle, *, name: str, operator: bool, address: str = HOME) -> int:
    """One right password on the admin; return 0, or the wait (s) it was refused for."""
    attempt = gate.begin_admin_sign_in(name=name, address=address, operator=operator)
    if not attempt.wait_s:
        gate.succeeded(attempt)
    return attempt.wait_s


def admin_fail(gate: Throttle, *, name: str, operator: bool = False) -> int:
    attempt = gate.begin_admin_sign_in(name=name, address=HOME, operator=operator)
    return -1 if attempt.wait_s else gate.failed(attempt)


def test_tenants_failures_from_a_shared_address_never_lock_an_operator_out_of_the_admin(gate):
    # The dashboard's failures lock the dashboard's door of the address, not the admin's.
    assert [fail(gate, name=f"tenant-{i}") for i in range(5)][-1] == 60
    assert sign_in(gate, name="tenant-9") == 60
    assert admin_sign_in(gate, name="tenant-9", operator=False) == 0
    # Tenants' failures on the admin lock the admin's door for names that are not operators'.
    assert [admin_fail(gate, name=f"tenant-{i}") for i in range(5, 10)][-1] == 60
    assert admin_sign_in(gate, name="tenant-9", operator=False) == 60
    # An operator's name counts by itself alone.
    assert admin_sign_in(gate, name="root", operator=True) == 0
    assert gate.begin_token(address=HOME).wait_s == 0


def test_an_operators_own_failures_lock_the_operators_name_wherever_it_comes_from(gate):
    assert [admin_fail(gate, name="root", operator=True) for _ in range(5)] == [0, 0, 0, 0, 60]
    assert admin_sign_in(gate, name="root", operator=True, address=AWAY) == 60
    assert admin_sign_in(gate, name="clerk", operator=True) == 0  # the address is not locked
    assert [c.strikes for c in gate.unlock_name("root")] == [1]
    assert admin_sign_in(gate, name="root", operator=True) == 0


def test_zero_failures_turns_throttling_off(gate, tollgate):
    tollgate(LOGIN_FAILURES=0)
    assert [fail(gate) for _ in range(50)] == [0] * 50
    assert sign_in(gate) == 0


def test_unlocking_a_name_clears_its_lock_and_strikes(gate, clock):
    assert [fail(gate, address=f"192.0.2.{i}") for i in range(5)][-1] == 60
    cleared = gate.unlock_name(" ALICE ")
    assert [(c.locked_s, c.strikes, c.failures) for c in cleared] == [(60, 1, 0)]
    assert sign_in(gate, address=AWAY) == 0
    assert [fail(gate, address=f"192.0.2.{i}") for i in range(5)][-1] == 60  # strike 1 again
    assert gate.unlock_name(OTHER) == []


def test_unlocking_an_address_clears_sign_ins_tokens_and_the_admins_sign_ins(gate):
    assert [fail(gate, name=f"user-{i}") for i in range(5)][-1] == 60
    for _ in range(5):
        gate.failed(gate.begin_token(address=HOME))
    assert [admin_fail(gate, name=f"user-{i}") for i in range(5, 10)][-1] == 60
    cleared = {c.key.split(":")[-2] for c in gate.unlock_address(HOME)}
    assert cleared == {"addr", "token", "admin"}
    assert sign_in(gate, name=OTHER) == 0
    assert gate.begin_token(address=HOME).wait_s == 0
    assert admin_sign_in(gate, name=OTHER, operator=False) == 0


def test_unlocking_all_clears_every_name_and_address(gate):
    assert [fail(gate, name=f"user-{i}") for i in range(5)][-1] == 60
    assert sign_in(gate, name=OTHER, address=AWAY) == 0  # a success leaves nothing behind
    assert len(gate.unlock_all()) == 6  # five names, one address
    assert sign_in(gate, name="user-0") == 0


def test_clients_without_an_address_share_no_lockout(gate):
    unknown = throttle_subjects.UNKNOWN_ADDRESS
    assert [fail(gate, name=f"user-{i}", address=unknown) for i in range(10)] == [0] * 10
    assert sign_in(gate, address=unknown) == 0
    assert [fail(gate, address=unknown) for _ in range(5)][-1] == 60  # the name still locks
    for _ in range(10):
        gate.failed(gate.begin_token(address=unknown))
    assert gate.begin_token(address=unknown).wait_s == 0


def test_names_are_folded_and_only_their_keyed_hash_is_in_the_key(gate):
    hostile = "  Ä:*?[x]" + "ß" * 200 + "\r\n"
    assert gate.name_key(hostile) == gate.name_key("ä:*?[x]" + "SS" * 200)
    suffix = gate.name_key(hostile).removeprefix(gate.prefix + ":name:")
    assert len(suffix) == 32 and set(suffix) <= set("0123456789abcdef")
    assert [fail(gate, name=hostile, address=f"192.0.2.{i}") for i in range(5)][-1] == 60
    assert sign_in(gate, name=NAME, address=AWAY) == 0


@pytest.mark.parametrize(
    ("hops", "remote", "forwarded", "client"),
    [
        (0, "203.0.113.7", "192.0.2.1", "203.0.113.7"),
        (1, "10.0.0.2", "192.0.2.1, 198.51.100.4", "198.51.100.4"),
        (2, "10.0.0.2", "192.0.2.1, 198.51.100.4, 10.0.0.1", "198.51.100.4"),
        (3, "10.0.0.2", "198.51.100.4, 10.0.0.1", "198.51.100.4"),  # skipped the outer proxy
        (1, "10.0.0.2", "", "10.0.0.2"),
        (0, "2001:db8:1:2:3:4:5:6", "", "2001:db8:1:2::/64"),
        (0, "::ffff:192.0.2.5", "", "192.0.2.5"),
        (1, "10.0.0.2", "192.0.2.8:51234", "192.0.2.8"),
        (1, "10.0.0.2", "[2001:db8::1]:443", "2001:db8::/64"),
        (1, "10.0.0.2", "not-an-address", throttle_subjects.UNKNOWN_ADDRESS),
        (0, "", "", throttle_subjects.UNKNOWN_ADDRESS),
    ],
)
def test_the_client_address_counts_the_trusted_proxies(settings, hops, remote, forwarded, client):
    settings.TOLLGATE = {**settings.TOLLGATE, "PROXY_HOPS": hops}
    meta = {"REMOTE_ADDR": remote, "HTTP_X_FORWARDED_FOR": forwarded}
    assert throttle_subjects.client_address(meta) == client


@pytest.mark.parametrize(
    ("wait_s", "phrase"),
    [
        (1, "1 second"),
        (59, "59 seconds"),
        (60, "1 minute"),
        (61, "2 minutes"),
        (3600, "60 minutes"),
    ],
)
def test_the_refusal_says_how_long_to_wait(wait_s, phrase):
    assert throttle_subjects.sign_in_refusal(wait_s) == (
        "Too many failed sign-ins for this account or address. "
        f"Try again in {phrase}, or ask an operator to unlock it."
    )


def test_a_redis_outage_falls_back_to_this_process_with_one_warning(
    settings, clock, tag, tollgate, caplog
):
    tollgate(LOGIN_FAILURES=5, LOGIN_LOCKOUT_S=60, LOGIN_LOCKOUT_MAX_S=3600, REDIS_TIMEOUT_MS=200)
    settings.REDIS_URL = "redis://127.0.0.1:1/0"  # nothing listens there
    gate = Throttle(clock=clock, prefix=f"tollgate:login:{tag}")
    with caplog.at_level(logging.WARNING, logger="accounts.throttle"):
        assert [fail(gate) for _ in range(5)] == [0, 0, 0, 0, 60]
        assert sign_in(gate) == 60
    outages = [r for r in caplog.records if "Redis unavailable" in r.getMessage()]
    assert len(outages) == 1
    with pytest.raises(throttle.StoreDown):
        gate.unlock_name(NAME)  # an operator is told, never answered from one process
