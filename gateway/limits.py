"""Rate limits and caps, checked in one Redis round trip (one Lua script) per request.

Scopes: the key, the group and the caller label, each with a request-per-minute and a
token-per-minute limit (fixed one-minute windows). Caps: a fleet-wide in-flight cap and a
per-group concurrency cap, held as leased slots (sorted-set members with an expiry) so a
crashed replica's slots lapse. Tokens are counted from the provider's real usage after the
answer, in both vendor shapes. Without Redis each process enforces limit / replicas.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from django.conf import settings

from gateway import errors
from gateway.shared_state import SharedState, SharedStateDown

PREFIX = "tollgate:rl:"
WINDOW_S = 60
OK, RPM, TPM, CAP = 0, 1, 2, 3
RETRY_RELEASE_S = 1.0

ADMIT = """
local now, window_ttl, rid, lease = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3], tonumber(ARGV[4])
local inflight_max, conc_max, n = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
for i = 1, n do
  local rpm, tpm = tonumber(ARGV[7 + 2 * i - 1]), tonumber(ARGV[7 + 2 * i])
  if rpm > 0 and tonumber(redis.call('GET', KEYS[2 + 2 * i - 1]) or '0') >= rpm then
    return {1, i}
  end
  if tpm > 0 and tonumber(redis.call('GET', KEYS[2 + 2 * i]) or '0') >= tpm then
    return {2, i}
  end
end
if inflight_max > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
  if redis.call('ZCARD', KEYS[1]) >= inflight_max then return {3, 0} end
end
if conc_max > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
  if redis.call('ZCARD', KEYS[2]) >= conc_max then return {3, 1} end
end
-- Peek at the first link's breaker too (one round trip for all of a request's checks):
-- closed with no failure counted means its call needs no breaker round trip of its own.
local clean = 0
if tonumber(ARGV[8 + 2 * n]) == 1 then
  local st = redis.call('HMGET', KEYS[#KEYS], 'state', 'failures')
  if (tonumber(st[1]) or 0) == 0 and (tonumber(st[2]) or 0) == 0 then clean = 1 end
end
local out = {0, clean}
for i = 1, n do
  local used = redis.call('INCR', KEYS[2 + 2 * i - 1])
  if used == 1 then redis.call('EXPIRE', KEYS[2 + 2 * i - 1], window_ttl) end
  out[#out + 1] = used
  out[#out + 1] = tonumber(redis.call('GET', KEYS[2 + 2 * i]) or '0')
end
if inflight_max > 0 then redis.call('ZADD', KEYS[1], lease, rid) end
if conc_max > 0 then redis.call('ZADD', KEYS[2], lease, rid) end
return out
"""


async def _zrem_both(client, keys: list[str], request_id: str):
    pipe = client.pipeline(transaction=False)
    pipe.zrem(keys[0], request_id)
    pipe.zrem(keys[1], request_id)
    return await pipe.execute()


@dataclass(frozen=True, slots=True)
class Scope:
    name: str  # "key:12", "group:3", "caller:3:<label>"
    rpm: int  # 0: no limit
    tpm: int


@dataclass(slots=True)
class Admission:
    request_id: str
    group_id: int
    scopes: tuple[Scope, ...]
    window: int
    in_shared: bool
    requests_used: list[int] = field(default_factory=list)
    tokens_used: list[int] = field(default_factory=list)
    breaker_clean: bool = False  # the first link's breaker was closed with no failure counted

    def headers(self, tokens_consumed: int | None = None) -> list[tuple[bytes, bytes]]:
        """Return x-ratelimit-* and token headers of the tightest scope (key, group, caller)."""
        out: list[tuple[bytes, bytes]] = []
        reset = str(max(1, (self.window + 1) * WINDOW_S - int(time.time()))).encode() + b"s"
        requests = self._tightest([s.rpm for s in self.scopes], self.requests_used)
        if requests is not None:
            limit, used = requests
            out.append((b"x-ratelimit-limit-requests", str(limit).encode()))
            out.append((b"x-ratelimit-remaining-requests", str(max(0, limit - used)).encode()))
            out.append((b"x-ratelimit-reset-requests", reset))
        tokens = self._tightest([s.tpm for s in self.scopes], self.tokens_used)
        if tokens is not None:
            limit, used = tokens
            remaining = str(max(0, limit - used - (tokens_consumed or 0))).encode()
            out.append((b"x-ratelimit-limit-tokens", str(limit).encode()))
            out.append((b"x-ratelimit-remaining-tokens", remaining))
            out.append((b"x-ratelimit-reset-tokens", reset))
            out.append((b"x-tokens-remaining", remaining))
        if tokens_consumed is not None:
            out.append((b"x-tokens-consumed", str(tokens_consumed).encode()))
        return out

    @staticmethod
    def _tightest(limits: list[int], used: list[int]) -> tuple[int, int] | None:
        """Return (limit, used) of the limited scope with the least room, or None."""
        best = None
        for limit, count in zip(limits, used, strict=False):
            if limit and (best is None or limit - count < best[0] - best[1]):
                best = (limit, count)
        return best


def _local_share(limit: int) -> int:
    """Split a fleet limit between replicas so the fleet never admits more than it."""
    return limit // settings.TOLLGATE["REPLICAS"]


class Limiter:
    def __init__(self, shared: SharedState) -> None:
        self._shared = shared
        self.inflight_max = settings.TOLLGATE["INFLIGHT_MAX"]
        self._script = None
        # Per-process stand-ins: counters per (scope, window) and in-flight sets.
        self._requests: dict[tuple[str, int], int] = {}
        self._tokens: dict[tuple[str, int], int] = {}
        self._inflight: set[str] = set()
        self._releases: set[asyncio.Task] = set()
        self._group_inflight: dict[int, set[str]] = {}

    async def admit(
        self,
        *,
        request_id: str,
        group_id: int,
        scopes: tuple[Scope, ...],
        concurrency: int | None,
        lease_s: float,
        breaker_key: str | None = None,
    ) -> Admission:
        """Admit a request or raise LM-3001 / LM-3002 / LM-3003 (with Retry-After)."""
        now = time.time()
        window = int(now // WINDOW_S)
        admission = Admission(request_id, group_id, scopes, window, in_shared=False)
        if self._shared.available:
            try:
                result = await self._admit_shared(
                    admission, concurrency or 0, now, lease_s, breaker_key
                )
                admission.in_shared = True
                admission.breaker_clean = result[0] == OK and result[1] == 1
            except SharedStateDown:
                result = None
        else:
            result = None
        if result is None:
            result = self._admit_local(admission, concurrency or 0)
        code = result[0]
        if code == OK:
            values = result[2:]
            admission.requests_used = [int(v) for v in values[0::2]]
            admission.tokens_used = [int(v) for v in values[1::2]]
            return admission
        retry_after = max(1, (window + 1) * WINDOW_S - int(now))
        if code == RPM:
            raise errors.RequestRateLimited(
                f"Request rate over limit for {scopes[result[1] - 1].name.split(':')[0]}.",
                retry_after_s=retry_after,
            )
        if code == TPM:
            raise errors.TokenRateLimited(
                f"Token rate over limit for {scopes[result[1] - 1].name.split(':')[0]}.",
                retry_after_s=retry_after,
            )
        which = "group concurrency cap" if result[1] else "fleet in-flight cap"
        raise errors.CapacityExhausted(f"The {which} is reached.", retry_after_s=1)

    async def finish(self, admission: Admission, *, tokens: int) -> None:
        """Release the slots and count the answer's real tokens against each scope."""
        if admission.in_shared:
            try:
                await self._shared.call(lambda r: self._finish_pipeline(r, admission, tokens))
                return
            except SharedStateDown:
                self.release_later(admission)
        self.finish_local(admission, tokens=tokens)

    def release_later(self, admission: Admission) -> None:
        """Free a shared admission's slots once Redis answers again (the finish failed).

        Without this a slot would stay taken for its whole lease after one slow round trip,
        and enough of them would refuse requests (LM-3003) the fleet could serve.
        """

        async def release() -> None:
            await asyncio.sleep(RETRY_RELEASE_S)
            keys = self._keys(admission)
            try:
                await self._shared.call(lambda r: _zrem_both(r, keys, admission.request_id))
            except SharedStateDown:
                pass  # the lease is the last safety net

        task = asyncio.get_running_loop().create_task(release())
        self._releases.add(task)
        task.add_done_callback(self._releases.discard)

    def finish_local(self, admission: Admission, *, tokens: int) -> None:
        self._inflight.discard(admission.request_id)
        self._group_inflight.get(admission.group_id, set()).discard(admission.request_id)
        if tokens:
            for scope in admission.scopes:
                slot = (scope.name, admission.window)
                self._tokens[slot] = self._tokens.get(slot, 0) + tokens

    # ---- Redis ----

    def _keys(self, admission: Admission) -> list[str]:
        keys = [PREFIX + "inflight", PREFIX + f"conc:{admission.group_id}"]
        for scope in admission.scopes:
            keys.append(f"{PREFIX}rpm:{scope.name}:{admission.window}")
            keys.append(f"{PREFIX}tpm:{scope.name}:{admission.window}")
        return keys

    async def _admit_shared(
        self,
        admission: Admission,
        concurrency: int,
        now: float,
        lease_s: float,
        breaker_key: str | None,
    ) -> list[int]:
        if self._script is None:
            self._script = self._shared.client.register_script(ADMIT)
        args: list = [
            now,
            WINDOW_S * 2,
            admission.request_id,
            now + lease_s,
            self.inflight_max,
            concurrency,
            len(admission.scopes),
        ]
        for scope in admission.scopes:
            args += [scope.rpm, scope.tpm]
        args.append(1 if breaker_key else 0)
        keys = self._keys(admission) + ([breaker_key] if breaker_key else [])
        return await self._shared.call(lambda r: self._script(keys=keys, args=args, client=r))

    async def _finish_pipeline(self, client, admission: Admission, tokens: int):
        pipe = client.pipeline(transaction=False)
        self.finish_into(pipe, admission, tokens=tokens)
        return await pipe.execute()

    def finish_into(self, pipe, admission: Admission, *, tokens: int) -> None:
        """Queue the finish of an admission on a Redis pipeline (see gateway/settle.py)."""
        keys = self._keys(admission)
        pipe.zrem(keys[0], admission.request_id)
        pipe.zrem(keys[1], admission.request_id)
        if tokens:
            for tpm_key in keys[3::2]:
                pipe.incrby(tpm_key, tokens)
                pipe.expire(tpm_key, WINDOW_S * 2)

    # ---- per-process fallback ----

    def _admit_local(self, admission: Admission, concurrency: int) -> list[int]:
        window = admission.window
        if len(self._requests) > 50_000:  # drop old windows
            self._requests = {k: v for k, v in self._requests.items() if k[1] >= window}
            self._tokens = {k: v for k, v in self._tokens.items() if k[1] >= window}
        for index, scope in enumerate(admission.scopes, start=1):
            if scope.rpm and self._requests.get((scope.name, window), 0) >= _local_share(scope.rpm):
                return [RPM, index]
            if scope.tpm and self._tokens.get((scope.name, window), 0) >= _local_share(scope.tpm):
                return [TPM, index]
        if self.inflight_max and len(self._inflight) >= _local_share(self.inflight_max):
            return [CAP, 0]
        group_set = self._group_inflight.setdefault(admission.group_id, set())
        if concurrency and len(group_set) >= _local_share(concurrency):
            return [CAP, 1]
        out = [OK, 0]
        for scope in admission.scopes:
            slot = (scope.name, window)
            self._requests[slot] = self._requests.get(slot, 0) + 1
            out += [self._requests[slot], self._tokens.get(slot, 0)]
        self._inflight.add(admission.request_id)
        group_set.add(admission.request_id)
        return out
