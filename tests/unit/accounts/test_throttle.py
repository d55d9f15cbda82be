"""Sign-in throttling's rules (accounts/throttle.py) on a clock the test moves, in this
process's memory and in real Redis alike."""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor

import pytest

from accounts import throttle
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
    clock.advance(throttle.STRIKE_MEMORY_S)
    assert [fail(gate) for _ in range(5)][-1] == 60


def test_failures_older_than_the_window_do_not_count(gate, clock):
    assert [fail(gate) for _ in range(4)] == [0, 0, 0, 0]
    clock.advance(throttle.FAILURE_WINDOW_S)
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


def test_concurrent_attempts_cannot_outrun_the_limit(gate):
    with ThreadPoolExecutor(8) as pool:
        attempts = list(
            pool.map(lambda i: gate.begin_sign_in(name=NAME, address=f"192.0.2.{i}"), range(20))
        )
    admitted = [attempt for attempt in attempts if not attempt.wait_s]
    assert len(admitted) == 5
    # The first failure to be counted locks the name; the others find it locked.
    assert [gate.failed(attempt) for attempt in admitted] == [60] * 5
    assert [c.strikes for c in gate.unlock_name(NAME)] == [1]


def test_attempts_in_flight_that_succeed_give_their_count_back(gate):
    first = [gate.begin_sign_in(name=NAME, address=HOME) for _ in range(5)]
    assert gate.begin_sign_in(name=NAME, address=AWAY).wait_s == 60  # the allowance is taken
    for attempt in first:
        gate.succeeded(attempt)
    assert sign_in(gate) == 0


def test_sign_ins_and_tenant_tokens_count_apart_per_address(gate):
    for _ in range(4):
        gate.failed(gate.begin_token(address=HOME))
    assert gate.failed(gate.begin_token(address=HOME)) == 60
    assert gate.begin_token(address=HOME).wait_s == 60
    assert sign_in(gate) == 0
    assert [fail(gate, name=f"user-{i}", address=AWAY) for i in range(5)][-1] == 60
    assert gate.begin_token(address=AWAY).wait_s == 0


def test_a_valid_token_gives_its_count_back(gate):
    for _ in range(4):
        gate.failed(gate.begin_token(address=HOME))
    for _ in range(10):
        attempt = gate.begin_token(address=HOME)
        assert attempt.wait_s == 0
        gate.succeeded(attempt)
    assert gate.failed(gate.begin_token(address=HOME)) == 60


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


def test_unlocking_an_address_clears_sign_ins_and_tokens(gate):
    assert [fail(gate, name=f"user-{i}") for i in range(5)][-1] == 60
    for _ in range(5):
        gate.failed(gate.begin_token(address=HOME))
    assert {c.key.split(":")[-2] for c in gate.unlock_address(HOME)} == {"addr", "token"}
    assert sign_in(gate, name=OTHER) == 0
    assert gate.begin_token(address=HOME).wait_s == 0


def test_unlocking_all_clears_every_name_and_address(gate):
    assert [fail(gate, name=f"user-{i}") for i in range(5)][-1] == 60
    assert len(gate.unlock_all()) == 6  # five names, one address
    assert sign_in(gate, name="user-0") == 0


def test_clients_without_an_address_share_no_lockout(gate):
    unknown = throttle.UNKNOWN_ADDRESS
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
        (1, "10.0.0.2", "not-an-address", throttle.UNKNOWN_ADDRESS),
        (0, "", "", throttle.UNKNOWN_ADDRESS),
    ],
)
def test_the_client_address_counts_the_trusted_proxies(settings, hops, remote, forwarded, client):
    settings.TOLLGATE = {**settings.TOLLGATE, "PROXY_HOPS": hops}
    meta = {"REMOTE_ADDR": remote, "HTTP_X_FORWARDED_FOR": forwarded}
    assert throttle.client_address(meta) == client


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
    assert throttle.sign_in_refusal(wait_s) == (
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
