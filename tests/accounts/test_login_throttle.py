"""Sign-in throttling (accounts/throttle.py) through real gateway processes: the dashboard's
login, the admin's, tenant API tokens, two gateways sharing Redis, the operators' ways out
(`manage.py unlock_login`, the User admin's action), what is not a failure (attempts in
flight, a database cut) and what never locks an operator out.

The gateways trust one proxy (TOLLGATE_PROXY_HOPS=1), so each test picks its client
addresses with X-Forwarded-For and no test locks out another's."""

from __future__ import annotations

import itertools
import re
import subprocess
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
import redis
from django.conf import settings
from django.contrib.auth import get_user_model
from django.test import Client

from tests.config.admin_client import csrf_token
from tests.support.processes import ROOT
from tests.support.services import (
    HAS_REDIS,
    delete_redis_keys,
    requires_postgres,
    requires_redis,
)
from tests.support.tenants import make_tenant
from tests.support.waits import wait_until

PASSWORD = "a-long-enough-password-1"
WRONG = "wrong-password-0"
WRONG_ANSWER = "Please enter a correct username and password"
ADMIN_WRONG_ANSWER = "Please enter the correct username and password for a staff account"
LOCKED = (
    "Too many failed sign-ins for this account or address. "
    "Try again in {}, or ask an operator to unlock it."
)
LOCKOUT_S = 2
ENV = {
    "TOLLGATE_LOGIN_FAILURES": "5",
    "TOLLGATE_LOGIN_LOCKOUT_S": str(LOCKOUT_S),
    "TOLLGATE_LOGIN_LOCKOUT_MAX_S": "60",
    "TOLLGATE_PROXY_HOPS": "1",
}
_addresses = itertools.count(1)


def new_address() -> str:
    n = next(_addresses)
    return f"198.51.{100 + n // 250}.{n % 250 + 1}"


@pytest.fixture(scope="module")
def fleet(module_gateways):
    """Two gateway processes on the same database and Redis: the first locks out for 2 s,
    for the tests that wait a lockout out; the second for 60 s, for the operators' tests
    (a lockout is stored as its end, so the fleet honours whichever gateway set it)."""
    return module_gateways(**ENV), module_gateways(**{**ENV, "TOLLGATE_LOGIN_LOCKOUT_S": "60"})


@pytest.fixture
def gateway(fleet):
    return fleet[0]


@pytest.fixture(autouse=True)
def no_lockouts_left():
    if HAS_REDIS:
        delete_redis_keys("tollgate:login:*")
    yield
    if HAS_REDIS:
        delete_redis_keys("tollgate:login:*")


@pytest.fixture
def user(transactional_db):
    return get_user_model().objects.create_user(username="carol", password=PASSWORD)


def sign_in(gateway, username: str, password: str, address: str, *, path: str = "/login/"):
    """Post the login form as a browser from `address` does; return the answer."""
    with httpx.Client(
        base_url=gateway.url, timeout=10, headers={"X-Forwarded-For": address}
    ) as client:
        page = client.get(path)
        assert page.status_code == 200, page.text
        return client.post(
            path,
            data={
                "csrfmiddlewaretoken": csrf_token(page.text),
                "username": username,
                "password": password,
            },
        )


def outcome(answer: httpx.Response) -> str:
    """Name a login answer: signed in, a wrong password, or locked out (and how long)."""
    if answer.status_code == 302:
        return "signed in"
    text = answer.text
    if WRONG_ANSWER in text or ADMIN_WRONG_ANSWER in text:
        return f"{answer.status_code} wrong"
    match = re.search(r"Too many failed sign-ins .*? Try again in (\d+ (?:second|minute)s?)", text)
    assert match, text[:2000]
    return f"{answer.status_code} locked {match.group(1)}"


def api_get(gateway, token: str, address: str) -> httpx.Response:
    return httpx.get(
        f"{gateway.url}/api/account",
        headers={"Authorization": f"Token {token}", "X-Forwarded-For": address},
        timeout=10,
    )


def manage(gateway, *args: str) -> subprocess.CompletedProcess:
    """Run `manage.py` as an operator would, with the gateway's database, Redis and secret."""
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=gateway.env,
        capture_output=True,
        text=True,
        timeout=60,
    )


# ---------------------------------------------------------------- the dashboard


def test_five_wrong_passwords_lock_the_name_until_the_lockout_ends(gateway, user):
    address = new_address()
    answers = [sign_in(gateway, "carol", WRONG, address) for _ in range(5)]
    right = sign_in(gateway, "carol", PASSWORD, address)
    locked_at = time.monotonic()

    assert [outcome(a) for a in answers] == ["200 wrong"] * 4 + ["429 locked 2 seconds"]
    assert answers[-1].headers["retry-after"] == "2"
    assert LOCKED.format("2 seconds") in answers[-1].text
    assert outcome(right).startswith("429 locked")  # 2 s, less the time it took to ask
    # After the lockout, the right password works at once.
    wait_until(
        lambda: sign_in(gateway, "carol", PASSWORD, address).status_code == 302,
        timeout_s=10,
        interval_s=0.2,
        what="the lockout to end",
    )
    assert time.monotonic() - locked_at >= LOCKOUT_S - 0.5
    # One line for the name and one for the address; neither the name nor the password.
    lockouts = re.findall(
        r"WARNING accounts.throttle Sign-in lockout: (\w+):(\S+) locked for 2 s \(strike 1\) "
        rf"after failures from {re.escape(address)}\n",
        gateway.log(),
    )
    assert [kind for kind, _ in lockouts] == ["name", "addr"]
    assert re.fullmatch(r"[0-9a-f]{32}", lockouts[0][1]) and lockouts[1][1] == address
    assert WRONG not in gateway.log() and "carol" not in gateway.log()


def test_a_second_lockout_lasts_twice_as_long(gateway, user):
    address = new_address()
    for _ in range(5):
        sign_in(gateway, "carol", WRONG, address)
    wait_until(
        lambda: outcome(sign_in(gateway, "carol", WRONG, address)) == "200 wrong",
        timeout_s=10,
        interval_s=0.2,
        what="the first lockout to end",
    )
    answers = [sign_in(gateway, "carol", WRONG, address) for _ in range(4)]
    right = sign_in(gateway, "carol", PASSWORD, address)

    assert [outcome(a) for a in answers] == ["200 wrong"] * 3 + ["429 locked 4 seconds"]
    assert outcome(right).startswith("429 locked")
    assert answers[-1].headers["retry-after"] == "4"  # twice TOLLGATE_LOGIN_LOCKOUT_S


def test_many_names_from_one_address_lock_the_address(gateway, user):
    address = new_address()
    answers = [sign_in(gateway, f"nobody-{i}", WRONG, address) for i in range(5)]

    assert [outcome(a) for a in answers] == ["200 wrong"] * 4 + ["429 locked 2 seconds"]
    assert outcome(sign_in(gateway, "carol", PASSWORD, address)) == "429 locked 2 seconds"
    assert outcome(sign_in(gateway, "carol", PASSWORD, new_address())) == "signed in"


def test_a_locked_sign_in_hashes_no_password(transactional_db, user, monkeypatch):
    from django.contrib.auth import forms

    calls = []
    real = forms.authenticate
    monkeypatch.setattr(forms, "authenticate", lambda *a, **kw: calls.append(1) or real(*a, **kw))
    client = Client(REMOTE_ADDR=new_address())
    for _ in range(5):
        client.post("/login/", {"username": "carol", "password": WRONG})
    assert len(calls) == 5

    right = client.post("/login/", {"username": "carol", "password": PASSWORD})

    assert right.status_code == 429 and len(calls) == 5
    assert "Too many failed sign-ins for this account or address." in right.content.decode()


def test_a_hostile_account_name_is_handled(gateway, user):
    hostile = ("Ä:*?[x]{ß}\\" * 14)[:150]
    address = new_address()
    answers = [sign_in(gateway, hostile, WRONG, address) for _ in range(5)]
    too_long = sign_in(gateway, "ä:*" * 5000, WRONG, new_address())

    assert [outcome(a) for a in answers] == ["200 wrong"] * 4 + ["429 locked 2 seconds"]
    # Its lock is its own: the user signs in from elsewhere.
    assert outcome(sign_in(gateway, "carol", PASSWORD, new_address())) == "signed in"
    assert outcome(too_long) == "200 wrong"
    assert "Traceback" not in gateway.log()
    if HAS_REDIS:
        keys = redis.Redis.from_url(settings.REDIS_URL).keys("tollgate:login:*")
        pattern = re.compile(r"tollgate:login:(name:[0-9a-f]{32}|addr:[0-9.]+)")
        assert keys and all(pattern.fullmatch(key.decode()) for key in keys), keys


# ---------------------------------------------------------------- the admin


def test_the_admin_answers_a_lockout_with_429_and_retry_after(gateway, transactional_db):
    get_user_model().objects.create_user("clerk", password=PASSWORD, is_staff=True)
    address = new_address()
    path = "/django-admin/login/"
    answers = [sign_in(gateway, "clerk", WRONG, address, path=path) for _ in range(5)]
    right = sign_in(gateway, "clerk", PASSWORD, address, path=path)

    assert [outcome(a) for a in answers] == ["200 wrong"] * 4 + ["429 locked 2 seconds"]
    assert answers[-1].headers["retry-after"] == "2"
    assert outcome(right) == "429 locked 2 seconds" and right.headers["retry-after"] == "2"
    assert LOCKED.format("2 seconds") in right.text
    elsewhere = sign_in(gateway, "clerk", PASSWORD, new_address(), path=path)
    # An operator's own name locks wherever it comes from.
    assert outcome(elsewhere) == "429 locked 2 seconds"
    assert elsewhere.headers["retry-after"] == "2"


@requires_redis
def test_tenants_failures_from_a_shared_address_never_lock_an_operator_out_of_the_admin(
    fleet, transactional_db, user
):
    _, long = fleet  # lockouts of 60 s: still in force when the operator signs in
    get_user_model().objects.create_superuser("root", "root@example.com", PASSWORD)
    office = new_address()  # an office NAT, or every client when PROXY_HOPS is wrong
    admin_path = "/django-admin/login/"
    on_dashboard = [sign_in(long, f"tenant-{i}", WRONG, office) for i in range(5)]
    on_admin = [sign_in(long, f"tenant-{i}", WRONG, office, path=admin_path) for i in range(5)]

    assert [outcome(a) for a in on_dashboard] == ["200 wrong"] * 4 + ["429 locked 1 minute"]
    assert [outcome(a) for a in on_admin] == ["200 wrong"] * 4 + ["429 locked 1 minute"]
    # Both doors are shut to the office's tenants, the right password included...
    assert outcome(sign_in(long, "carol", PASSWORD, office)).startswith("429 locked")
    assert outcome(sign_in(long, "carol", PASSWORD, office, path=admin_path)).startswith(
        "429 locked"
    )
    # ...and the operator behind the same address signs into the admin.
    assert outcome(sign_in(long, "root", PASSWORD, office, path=admin_path)) == "signed in"
    locked = redis.Redis.from_url(settings.REDIS_URL).keys(f"tollgate:login:*:{office}")
    assert sorted(key.decode().split(":")[2] for key in locked) == ["addr", "admin"]


def test_the_admin_action_clears_a_users_lockout(fleet, transactional_db, user):
    gateway, long = fleet
    get_user_model().objects.create_superuser("root", "root@example.com", PASSWORD)
    address = new_address()
    for _ in range(5):
        sign_in(long, "carol", WRONG, address)
    assert outcome(sign_in(long, "carol", PASSWORD, new_address())).startswith("429 locked")

    with httpx.Client(
        base_url=gateway.url, timeout=10, headers={"X-Forwarded-For": new_address()}
    ) as admin:
        login = admin.get("/django-admin/login/")
        admin.post(
            "/django-admin/login/",
            data={
                "csrfmiddlewaretoken": csrf_token(login.text),
                "username": "root",
                "password": PASSWORD,
            },
        )
        changelist = admin.get("/django-admin/auth/user/")
        assert "Clear sign-in lockouts for selected users" in changelist.text
        done = admin.post(
            "/django-admin/auth/user/",
            data={
                "csrfmiddlewaretoken": csrf_token(changelist.text),
                "action": "clear_sign_in_lockouts",
                "_selected_action": [str(user.pk)],
                "index": "0",
            },
            follow_redirects=True,
        )

    assert "Cleared sign-in lockouts of: carol." in done.text
    # The name is free; the address that guessed stays locked (`unlock_login --address`).
    assert outcome(sign_in(long, "carol", PASSWORD, new_address())) == "signed in"
    assert outcome(sign_in(long, "carol", PASSWORD, address)).startswith("429 locked")


# ---------------------------------------------------------------- tenant API tokens


def test_unknown_tokens_from_one_address_lock_it_out_of_the_tenant_api(gateway, transactional_db):
    tenant = make_tenant()
    address = new_address()
    answers = [api_get(gateway, f"tg-guess-{i:040d}", address) for i in range(5)]
    valid = api_get(gateway, tenant.api_token, address)
    locked_at = time.monotonic()

    assert [(a.status_code, a.json()["error"]["code"]) for a in answers] == [
        (401, "LM-1001")
    ] * 4 + [(429, "LM-3001")]
    assert valid.status_code == 429 and valid.headers["retry-after"] == "2"
    assert valid.json()["error"] == {
        "message": "Too many unknown or revoked tenant tokens from this address. "
        "Try again in 2 seconds, or ask an operator to unlock it.",
        "type": "rate_limit_error",
        "code": "LM-3001",
    }
    assert api_get(gateway, tenant.api_token, new_address()).status_code == 200
    # Sign-ins from that address are counted apart.
    assert outcome(sign_in(gateway, "nobody", WRONG, address)) == "200 wrong"
    wait_until(
        lambda: api_get(gateway, tenant.api_token, address).status_code == 200,
        timeout_s=10,
        interval_s=0.2,
        what="the token lockout to end",
    )
    assert time.monotonic() - locked_at >= LOCKOUT_S - 0.5


# ---------------------------------------------------------------- the fleet and operators


@requires_redis
def test_a_lockout_on_one_gateway_holds_on_the_other(fleet, user):
    short, long = fleet
    for _ in range(5):
        sign_in(long, "carol", WRONG, new_address())

    assert outcome(sign_in(short, "carol", PASSWORD, new_address())).startswith("429 locked")


@requires_redis
def test_unlock_login_clears_a_name_and_an_address(fleet, user):
    short, long = fleet
    address = new_address()
    for _ in range(5):
        sign_in(long, "carol", WRONG, address)
    assert outcome(sign_in(short, "carol", PASSWORD, address)).startswith("429 locked")

    names = manage(long, "unlock_login", "--username", "Carol", "--username", "nobody")
    assert names.returncode == 0, names.stderr
    assert outcome(sign_in(short, "carol", PASSWORD, address)).startswith("429 locked")
    addresses = manage(long, "unlock_login", "--address", address)
    assert addresses.returncode == 0, addresses.stderr

    assert outcome(sign_in(short, "carol", PASSWORD, address)) == "signed in"
    assert names.stdout.splitlines()[0] == "account name 'Carol': cleared 1 record(s)"
    assert re.fullmatch(
        r"  tollgate:login:name:[0-9a-f]{32}: locked \d+ s more, 0 failure\(s\), 1 strike\(s\)",
        names.stdout.splitlines()[1],
    )
    assert names.stdout.splitlines()[2] == "account name 'nobody': nothing to clear"
    assert addresses.stdout.splitlines()[0] == f"address {address}: cleared 1 record(s)"
    # A success leaves nothing behind; one more failure leaves its name's and its address's.
    assert outcome(sign_in(short, "nobody", WRONG, address)) == "200 wrong"
    everything = manage(long, "unlock_login", "--all")
    assert everything.stdout.splitlines()[0] == "all names and addresses: cleared 2 record(s)"


# ---------------------------------------------------------------- what is not a failure


def test_64_concurrent_calls_with_one_valid_token_from_one_address_are_all_served(
    gateway, transactional_db
):
    tenant = make_tenant()
    address = new_address()
    with ThreadPoolExecutor(64) as pool:
        answers = list(
            pool.map(lambda _: api_get(gateway, tenant.api_token, address).status_code, range(64))
        )

    assert Counter(answers) == {200: 64}


def test_valid_tokens_are_served_while_wrong_ones_from_the_same_address_are_in_flight(
    gateway, transactional_db
):
    tenant = make_tenant()
    address = new_address()
    # Four guesses (one short of a lockout) among 32 valid calls, all at once.
    secrets = [f"tg-guess-{i:040d}" if i % 9 == 0 else tenant.api_token for i in range(36)]
    with ThreadPoolExecutor(36) as pool:
        answers = list(pool.map(lambda s: api_get(gateway, s, address).status_code, secrets))

    assert Counter(answers) == {200: 32, 401: 4}


def test_concurrent_unknown_tokens_cannot_outrun_the_limit(fleet, transactional_db):
    _, long = fleet  # a lockout of 60 s outlasts the burst: no waiter outlives it
    address = new_address()
    with ThreadPoolExecutor(64) as pool:
        answers = list(pool.map(lambda i: api_get(long, f"tg-guess-{i:040d}", address), range(64)))

    # Five were looked up (the fifth answered with the lockout); the rest found it locked.
    assert Counter(a.status_code for a in answers) == {401: 4, 429: 60}
    assert {a.json()["error"]["code"] for a in answers if a.status_code == 429} == {"LM-3001"}
    assert long.log().count(f"token:{address} locked for 60 s (strike 1)") == 1
    assert f"token:{address} locked for 120 s" not in long.log()


def test_eight_colleagues_behind_one_address_sign_in_at_once(gateway, transactional_db):
    names = [f"colleague-{i}" for i in range(8)]
    for name in names:
        get_user_model().objects.create_user(name, password=PASSWORD)
    office = new_address()
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda n: outcome(sign_in(gateway, n, PASSWORD, office)), names))

    assert answers == ["signed in"] * 8


@requires_postgres
@requires_redis
def test_a_database_cut_counts_no_failure_and_leaves_no_lockout(
    spawn_gateway, database_relay, transactional_db, user
):
    relay, relayed_url = database_relay
    gateway = spawn_gateway(**ENV, DATABASE_URL=relayed_url)
    tenant = make_tenant()
    office = new_address()
    assert api_get(gateway, tenant.api_token, office).status_code == 200
    browser = httpx.Client(base_url=gateway.url, timeout=10, headers={"X-Forwarded-For": office})
    csrf = csrf_token(browser.get("/login/").text)

    def sign_in_right() -> httpx.Response:
        form = {"csrfmiddlewaretoken": csrf, "username": "carol", "password": PASSWORD}
        return browser.post("/login/", data=form)

    relay.cut()
    during = [api_get(gateway, tenant.api_token, office).status_code for _ in range(8)]
    during += [sign_in_right().status_code for _ in range(8)]
    relay.restore()

    def answered() -> httpx.Response | None:
        answer = api_get(gateway, tenant.api_token, office)
        return answer if answer.status_code < 500 else None

    first_after = wait_until(answered, timeout_s=15, interval_s=0.2, what="the database back")
    signed_in = sign_in_right()
    browser.close()

    assert all(status >= 500 for status in during), during  # server errors, never 401 or 429
    assert first_after.status_code == 200
    assert signed_in.status_code == 302
    client = redis.Redis.from_url(settings.REDIS_URL)
    assert client.hgetall(f"tollgate:login:token:{office}") == {}
    assert client.hgetall(f"tollgate:login:addr:{office}") == {}
