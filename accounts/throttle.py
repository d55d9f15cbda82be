"""Sign-in throttling: per account name and per client address, fleet-wide through Redis.

The rules (numbers from core.config.tollgate()):

- A sign-in (the dashboard's and the admin's login form) is an attempt by an account name
  from a client address. A tenant API request with `Authorization: Token ...` is an attempt
  by its address alone. Each door counts apart per address: the dashboard's sign-ins, the
  tenant tokens and the admin's sign-ins, so an office that mistypes passwords does not stop
  its scripts' API calls, nor the reverse, and neither touches the admin.
- On the admin, an operator's name (an active staff user's) counts by its name alone: the
  failures of tenants who share an address (an office NAT, or every client when PROXY_HOPS is
  wrong) never lock the operator out; only failures of the operator's own name do, which a
  tenant must guess first. Other names on the admin count by name and the admin's address.
- A name is NFKC-normalised, case-folded and stripped, and only its keyed hash goes into a
  Redis key (a hostile name cannot shape keys, a password typed as a name is not stored).
  The address is REMOTE_ADDR, or with PROXY_HOPS = N the Nth X-Forwarded-For entry from the
  right; an IPv6 client counts by its /64 (one host holds a whole /64); an attempt without
  a parsable address counts by its name alone.
- LOGIN_FAILURES failures of a name or of an address within FAILURE_WINDOW_S lock it: for
  LOGIN_LOCKOUT_S the first time, twice as long at each further lockout (its strikes are
  remembered STRIKE_MEMORY_S after the last one), at most LOGIN_LOCKOUT_MAX_S. The failure
  that reaches the limit is already answered with the lockout. LOGIN_FAILURES = 0: off.
- Only a wrong secret is a failure: a wrong password, an unknown or revoked token. A right
  one clears its name's failures (not its strikes). An attempt that ends in a server error
  (the database unreachable) is neither: it is given back.
- While a name or the address is locked, an attempt is refused before any password is
  hashed or any token looked up, even with the right secret.

Attempts in flight. Failures are counted when they are known, never in advance, so attempts
under way are no failures and a right secret is never refused because of them. To keep
concurrent guesses from outrunning the limit, each subject (name, address) lets at most
LOGIN_FAILURES minus its failures so far be checked at once: if every one of them turned out
wrong, the last would lock it, and no further guess was let in meanwhile. An attempt beyond
that waits for a slot (it is not refused): a password check or a token lookup takes
milliseconds to a second, so 64 calls with one valid token or 8 colleagues behind one NAT
all get through, a little later. If the slots' attempts were guesses, the lockout they cause
refuses the waiters, as it should. A slot is a lease of IN_FLIGHT_LEASE_S, so the slots of a
process killed mid-check come back; an attempt that finds no slot within SLOT_WAIT_S (the
fleet too slow to check anything) is refused as busy, retry in BUSY_RETRY_S, with no lockout.

Operators clear names and addresses: `manage.py unlock_login`, and the User admin's action.

Redis unset (the embedded single-process mode): the same state in this process's memory.
Redis failing: each process falls back to that memory with one warning, and goes back to
Redis when it answers again. Failing open (per process) rather than closed because the rest
of Tollgate serves through a Redis outage, and a shut login page would lock the operators
out of the admin they need during one; a per-process throttle still bounds the guessing.

Beside this module: accounts/throttle_subjects.py (a name's hash, a client's address, the
refusals' words) and accounts/throttle_stores.py (the counting, in Redis or in memory).
"""

from __future__ import annotations

import logging
import math
import random
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import redis
from django.conf import settings

from accounts.throttle_stores import FLIGHT, Cleared, LocalStore, RedisStore, Rules
from accounts.throttle_subjects import UNKNOWN_ADDRESS, name_digest

log = logging.getLogger(__name__)

PREFIX = "tollgate:login"
SLOT_WAIT_S = 30.0  # about a reverse proxy's patience
BUSY_RETRY_S = 1
RETRY_REDIS_AFTER_S = 1.0  # after a failure, this process uses its memory this long


def _new_flight() -> str:
    return FLIGHT + secrets.token_hex(8)


@dataclass(frozen=True)
class Attempt:
    """A sign-in or token check under way; `wait_s` > 0: refused, retry after that long
    (`busy`: no slot came free in time, rather than a lockout)."""

    keys: tuple[str, ...]
    has_name: bool
    address: str
    wait_s: int = 0
    busy: bool = False
    flight: str = field(default_factory=_new_flight)  # its slot's field on each key


class StoreDown(Exception):
    """Redis did not answer an operator's unlock (which never falls back to memory)."""


# ---------------------------------------------------------------- the throttle


class Throttle:
    """Sign-in and token attempts against the rules; Redis when configured and answering."""

    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.time,
        prefix: str = PREFIX,
        slot_wait_s: float = SLOT_WAIT_S,
    ) -> None:
        self.clock = clock
        self.prefix = prefix
        self.slot_wait_s = slot_wait_s
        self.local = LocalStore()
        self._stores: dict[str, RedisStore] = {}
        self._stores_lock = threading.Lock()
        self._down_until = 0.0
        self.degraded = False

    # -- keys

    def name_key(self, name: str) -> str:
        return f"{self.prefix}:name:{name_digest(name)}"

    def address_keys(self, address: str) -> tuple[str, str, str]:
        """Return the address's keys: the dashboard's sign-ins, tenant tokens, the admin's."""
        return (
            f"{self.prefix}:addr:{address}",
            f"{self.prefix}:token:{address}",
            f"{self.prefix}:admin:{address}",
        )

    # -- attempts

    # An attempt without a known address counts by its name alone: a bucket shared by every
    # such client would let one of them lock all the others out.

    def begin_sign_in(self, *, name: str, address: str) -> Attempt:
        """Begin a dashboard sign-in: it waits for a slot, or comes back refused."""
        keys = (self.name_key(name), *self._address_key(address, 0))
        return self._begin(Attempt(keys=keys, has_name=True, address=address))

    def begin_admin_sign_in(self, *, name: str, address: str, operator: bool) -> Attempt:
        """Begin an admin sign-in; an operator's name (`operator`) counts by the name alone."""
        keys = (self.name_key(name), *(() if operator else self._address_key(address, 2)))
        return self._begin(Attempt(keys=keys, has_name=True, address=address))

    def begin_token(self, *, address: str) -> Attempt:
        keys = self._address_key(address, 1)
        return self._begin(Attempt(keys=keys, has_name=False, address=address))

    def _address_key(self, address: str, scope: int) -> tuple[str, ...]:
        return () if address == UNKNOWN_ADDRESS else (self.address_keys(address)[scope],)

    def failed(self, attempt: Attempt) -> int:
        """Count the attempt as failed; return the seconds it is now locked out (0: not)."""
        rules = Rules.from_settings()
        if not rules.failures or attempt.wait_s or not attempt.keys:
            return 0
        out = self._run(
            lambda store, now_ms: store.fail(attempt.keys, attempt.flight, rules, now_ms)
        )
        for key, strike, locked_ms in zip(attempt.keys, out[1::2], out[2::2], strict=True):
            if locked_ms:
                log.warning(
                    "Sign-in lockout: %s locked for %d s (strike %d) after failures from %s",
                    key.removeprefix(self.prefix + ":"),
                    math.ceil(locked_ms / 1000),
                    strike,
                    attempt.address,
                )
        return math.ceil(out[0] / 1000)

    def succeeded(self, attempt: Attempt) -> None:
        """Free the attempt's slot and clear its name's failures: the secret was right."""
        self._end(attempt, clears_name=attempt.has_name)

    def released(self, attempt: Attempt) -> None:
        """Give the attempt back uncounted: it ended in a server error, not a wrong secret."""
        self._end(attempt, clears_name=False)

    def _end(self, attempt: Attempt, *, clears_name: bool) -> None:
        if not Rules.from_settings().failures or attempt.wait_s or not attempt.keys:
            return
        self._run(
            lambda store, now_ms: store.end(attempt.keys, attempt.flight, clears_name=clears_name)
        )

    def _begin(self, attempt: Attempt) -> Attempt:
        rules = Rules.from_settings()
        if not rules.failures or not attempt.keys:
            return attempt
        give_up_at = time.monotonic() + self.slot_wait_s
        pause_s = 0.005
        while True:
            wait_ms = self._run(
                lambda store, now_ms: store.begin(attempt.keys, attempt.flight, rules, now_ms)
            )
            if wait_ms == 0:
                return attempt
            if wait_ms > 0:
                return replace(attempt, wait_s=math.ceil(wait_ms / 1000))
            if time.monotonic() >= give_up_at:
                return replace(attempt, wait_s=BUSY_RETRY_S, busy=True)
            # A check takes milliseconds (a token) to a second (a password hash): poll soon,
            # then less often; the jitter keeps waiters from asking all at once.
            time.sleep(pause_s * random.uniform(0.5, 1.0))
            pause_s = min(pause_s * 2, 0.1)

    # -- operators

    def unlock_name(self, name: str) -> list[Cleared]:
        return self._clear([self.name_key(name)])

    def unlock_address(self, address: str) -> list[Cleared]:
        return self._clear(list(self.address_keys(address)))

    def unlock_all(self) -> list[Cleared]:
        return self._run(
            lambda store, now_ms: store.clear(store.keys(self.prefix + ":"), now_ms),
            fallback=False,
        )

    def _clear(self, keys: list[str]) -> list[Cleared]:
        # An operator must know whether the unlock reached the fleet: no silent fallback.
        return self._run(lambda store, now_ms: store.clear(keys, now_ms), fallback=False)

    # -- the store of the moment

    def _run(self, operation, *, fallback: bool = True):
        now_ms = int(self.clock() * 1000)
        url = settings.REDIS_URL
        if not url:
            return operation(self.local, now_ms)
        if not fallback or time.monotonic() >= self._down_until:
            try:
                result = operation(self._store(url), now_ms)
            except (redis.RedisError, OSError) as exc:
                if not fallback:
                    raise StoreDown(f"Redis unavailable ({type(exc).__name__})") from exc
                self._failed(exc)
            else:
                if self.degraded:
                    self.degraded = False
                    log.warning("Redis is back: sign-in throttling is shared again")
                return result
        return operation(self.local, now_ms)

    def _store(self, url: str) -> RedisStore:
        store = self._stores.get(url)
        if store is None:
            with self._stores_lock:
                store = self._stores.get(url)
                if store is None:
                    store = self._stores[url] = RedisStore(url)
        return store

    def _failed(self, exc: BaseException) -> None:
        self._down_until = time.monotonic() + RETRY_REDIS_AFTER_S
        if not self.degraded:
            self.degraded = True
            log.warning(
                "Redis unavailable (%s): sign-in throttling falls back to this process",
                type(exc).__name__,
            )


default = Throttle()
