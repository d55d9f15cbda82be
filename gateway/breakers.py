"""Circuit breakers shared by every replica (state in Redis), per (scope, model).

A scope is the provider name for platform links, or "{provider}#group:{id}" for links
served from a team pool, so the two never judge each other. States: closed -> open after
TOLLGATE_BREAKER_FAILURES consecutive failures -> after TOLLGATE_BREAKER_COOLDOWN_S one
probe is admitted fleet-wide (half-open) -> its success closes, its failure re-opens. A
probe holds a lease as long as its call's deadline, so a hung probe fails at its deadline
and a crashed replica's probe lapses. A result that says nothing about the provider
(cancellation, client fault, chain-lock refusal) hands the probe back.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from core import bus, metrics
from core.config import tollgate
from core.shared_state import Script, SharedState, SharedStateDown

CLOSED, HALF_OPEN, OPEN = 0, 1, 2
PREFIX = "tollgate:cb:"

# KEYS[1] breaker hash. ARGV: op, now, threshold, cooldown, lease, token.
# Returns {admitted (0/1), kind (1 probe, 2 closed with failures counted, 0 clean), state}.
LUA = Script("""
local key, op = KEYS[1], ARGV[1]
local now, threshold, cooldown, lease = tonumber(ARGV[2]), tonumber(ARGV[3]),
  tonumber(ARGV[4]), tonumber(ARGV[5])
local token = ARGV[6]
local st = redis.call('HMGET', key, 'state', 'failures', 'opened', 'probe_until', 'probe')
local state, failures = tonumber(st[1]) or 0, tonumber(st[2]) or 0
local opened, probe_until = tonumber(st[3]) or 0, tonumber(st[4]) or 0
local probe = st[5] or ''
if op == 'acquire' then
  if state == 2 then
    if now < opened + cooldown then return {0, 0, 2} end
    redis.call('HSET', key, 'state', 1, 'probe_until', now + lease, 'probe', token)
    return {1, 1, 1}
  elseif state == 1 then
    if now < probe_until then return {0, 0, 1} end
    redis.call('HSET', key, 'probe_until', now + lease, 'probe', token)
    return {1, 1, 1}
  end
  if failures > 0 then return {1, 2, 0} end
  return {1, 0, 0}
elseif op == 'success' then
  if state == 1 and probe ~= token then return {1, 0, state} end
  redis.call('HSET', key, 'state', 0, 'failures', 0, 'probe', '')
  return {1, 0, 0}
elseif op == 'failure' then
  if state == 1 then
    if probe ~= token then return {1, 0, 1} end
    redis.call('HSET', key, 'state', 2, 'opened', now, 'failures', 0, 'probe', '')
    return {1, 0, 2}
  elseif state == 2 then
    return {1, 0, 2}
  end
  failures = failures + 1
  if failures >= threshold then
    redis.call('HSET', key, 'state', 2, 'opened', now, 'failures', 0)
    return {1, 0, 2}
  end
  redis.call('HSET', key, 'failures', failures)
  return {1, 0, 0}
elseif op == 'release' then
  if state == 1 and probe == token then
    redis.call('HSET', key, 'probe_until', 0, 'probe', '')
  end
  return {1, 0, state}
end
return {0, 0, state}
""")


@dataclass(slots=True)
class Ticket:
    scope: str
    model: str
    probe: bool
    token: str
    clean: bool = False  # admitted while closed with no failures counted: success is a no-op

    @property
    def key(self) -> str:
        return f"{self.scope}|{self.model}"


@dataclass(slots=True)
class _LocalBreaker:
    state: int = CLOSED
    failures: int = 0
    opened: float = 0.0
    probe_until: float = 0.0
    probe: str = ""


class BreakerBoard:
    def __init__(self, shared: SharedState, *, clock: Callable[[], float] = time.time) -> None:
        self._shared = shared
        self._clock = clock  # wall time: shared by replicas through Redis
        self.threshold = tollgate().breaker_failures
        self.cooldown_s = tollgate().breaker_cooldown_s
        self._local: dict[str, _LocalBreaker] = {}
        self._counter = 0

    def peek(self, scope: str, model: str) -> tuple[str, tuple[str, ...]]:
        """Name what to read of one breaker in another module's Redis round trip (the
        admission's), so a call on a closed, clean breaker costs no round trip of its own."""
        return f"{PREFIX}{scope}|{model}", ("state", "failures")

    def ticket_from_peek(self, scope: str, model: str, peeked: list | None) -> Ticket | None:
        """Admit a call on what `peek` read: closed with no failure counted. Anything
        else (or no read: Redis did not answer) returns None: `acquire` decides then."""
        if peeked is None or any(int(value or 0) for value in peeked):
            return None
        self._counter += 1
        ticket = Ticket(scope, model, False, f"{bus.REPLICA_ID}:{self._counter}", clean=True)
        self._gauge(ticket, CLOSED)
        return ticket

    async def acquire(self, scope: str, model: str, *, lease_s: float = 120.0) -> Ticket | None:
        """Admit a call (a ticket, maybe a probe) or return None while the circuit is open."""
        self._counter += 1
        ticket = Ticket(scope, model, False, f"{bus.REPLICA_ID}:{self._counter}")
        admitted, probe, state = await self._run("acquire", ticket, lease_s)
        self._gauge(ticket, state)
        if not admitted:
            return None
        ticket.probe = probe == 1
        ticket.clean = probe == 0
        return ticket

    async def success(self, ticket: Ticket) -> None:
        if ticket.clean:
            return  # nothing to reset: spare the round trip on the common path
        _, _, state = await self._run("success", ticket, 0)
        self._gauge(ticket, state)

    async def failure(self, ticket: Ticket) -> None:
        _, _, state = await self._run("failure", ticket, 0)
        self._gauge(ticket, state)

    async def release(self, ticket: Ticket) -> None:
        """Hand back a probe without judging the provider."""
        if ticket.probe:
            await self._run("release", ticket, 0)

    def _gauge(self, ticket: Ticket, state: int) -> None:
        if "#" not in ticket.scope:  # team-scoped breakers would add a series per group
            metrics.labeled(metrics.CIRCUIT_STATE, ticket.scope, ticket.model).set(state)

    async def _run(self, op: str, ticket: Ticket, lease_s: float) -> tuple[int, int, int]:
        now = self._clock()
        if self._shared.available:
            try:
                [result] = await self._shared.run(
                    LUA.command(
                        [PREFIX + ticket.key],
                        [op, now, self.threshold, self.cooldown_s, lease_s, ticket.token],
                    )
                )
                return int(result[0]), int(result[1]), int(result[2])
            except SharedStateDown:
                pass
        return self._run_local(op, ticket, now, lease_s)

    def _run_local(
        self, op: str, ticket: Ticket, now: float, lease_s: float
    ) -> tuple[int, int, int]:
        b = self._local.setdefault(ticket.key, _LocalBreaker())
        if op == "acquire":
            if b.state == OPEN:
                if now < b.opened + self.cooldown_s:
                    return 0, 0, OPEN
                b.state, b.probe_until, b.probe = HALF_OPEN, now + lease_s, ticket.token
                return 1, 1, HALF_OPEN
            if b.state == HALF_OPEN:
                if now < b.probe_until:
                    return 0, 0, HALF_OPEN
                b.probe_until, b.probe = now + lease_s, ticket.token
                return 1, 1, HALF_OPEN
            return 1, (2 if b.failures else 0), CLOSED
        if op == "success":
            if b.state == HALF_OPEN and b.probe != ticket.token:
                return 1, 0, b.state
            b.state, b.failures, b.probe = CLOSED, 0, ""
            return 1, 0, CLOSED
        if op == "failure":
            if b.state == HALF_OPEN:
                if b.probe == ticket.token:
                    b.state, b.opened, b.failures, b.probe = OPEN, now, 0, ""
                return 1, 0, b.state
            if b.state == OPEN:
                return 1, 0, OPEN
            b.failures += 1
            if b.failures >= self.threshold:
                b.state, b.opened, b.failures = OPEN, now, 0
            return 1, 0, b.state
        if op == "release" and b.state == HALF_OPEN and b.probe == ticket.token:
            b.probe_until, b.probe = 0.0, ""
        return 1, 0, b.state
