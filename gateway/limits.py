"""Rate limits and caps, checked in one Redis round trip (one Lua script) per request.

Scopes: the key, the group and the caller label, each with a request-per-minute and a
token-per-minute limit (fixed one-minute windows). Caps: a fleet-wide in-flight cap (model
requests and web actions each their own: gateway/admission.py) and a per-group concurrency
cap, held as leased slots (sorted-set members with an expiry) so a crashed replica's slots
lapse.

Tokens: admission reserves the request's estimate (prompt bound + max output tokens) in the
TPM counters, so a concurrent burst sees what is already promised; the finish adds
(real usage - estimate), in both vendor shapes. A scope refuses once used >= limit, so it is
passed by at most one request's estimate.

Once the fleet counts Redis returned show a scope's requests at its rpm, the rest of that
window is refused in the process without asking Redis (a window's request count only grows;
a raised limit is judged by Redis again).

Without Redis each process judges alone, from what it last saw: per (scope, window) it
keeps the fleet counts the script returned, and takes as its share of the window what was
left of it then, split between replicas: (limit - seen) // replicas (limit // replicas for a
window it never saw). That share binds it for the rest of the window, Redis back or not, so
replicas that come back one after the other never hand out each other's shares; the fleet
admits at most the limit plus about one request per replica in any window. When Redis
answers again, the first admission of the window pushes what this process counted alone
before it is judged (one extra round trip per recovery, none per request), and brings a
Redis that came back empty up to what this process saw.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass

from core import errors
from core.config import tollgate
from core.shared_state import SharedState, SharedStateDown
from gateway.admission import MODEL, PREFIX, Admission, Bulkhead, Peek, Scope
from gateway.limits_scripts import ADMIT, SYNC

WINDOW_S = 60
OK, RPM, TPM, CAP = 0, 1, 2, 3
RETRY_RELEASE_S = 1.0
SYNC_SLOTS_PER_CALL = 500


@dataclass(slots=True)
class Tally:
    """What this process knows of one (scope, window)."""

    seen_requests: int = 0  # fleet counts Redis last returned
    seen_tokens: int = 0
    alone_requests: int = 0  # counted without Redis, not pushed to it yet
    alone_tokens: int = 0
    # Once judged without Redis: this process's share of the rest of the window, and what
    # it has admitted since (with Redis or without), until the window ends.
    shared_out: bool = False
    share_requests: int = 0
    share_tokens: int = 0
    own_requests: int = 0
    own_tokens: int = 0

    def share_out(self, scope: Scope, replicas: int) -> None:
        self.shared_out = True
        self.share_requests = (scope.rpm - self.seen_requests) // replicas
        self.share_tokens = (scope.tpm - self.seen_tokens) // replicas

    def over_share(self, scope: Scope) -> int:
        """Return RPM or TPM if this process has used its share of the scope, else OK."""
        if scope.rpm and self.own_requests >= self.share_requests:
            return RPM
        if scope.tpm and self.own_tokens >= self.share_tokens:
            return TPM
        return OK


class Limiter:
    def __init__(self, shared: SharedState, *, clock: Callable[[], float] = time.time) -> None:
        self._shared = shared
        self._clock = clock
        # Windows are counted from this Unix time (0: on the minute); a fleet shares it.
        conf = tollgate()
        self._epoch_s = conf.rate_epoch_s
        self._replicas = conf.replicas
        self._tallies: dict[tuple[str, int], Tally] = {}
        self._window = 0  # the newest window admitted; older tallies are dropped
        self._resync_window = -1  # a window judged without Redis: push before using Redis
        self._shares_window = -1  # a window judged without Redis: shares bind till it ends
        self._syncing: asyncio.Task | None = None
        self._inflight: dict[str, set[str]] = {}  # per bulkhead, admitted alone
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
        tokens_estimate: int = 0,
        peek: Peek | None = None,
        bulkhead: Bulkhead = MODEL,
        also: tuple[tuple, ...] = (),
    ) -> Admission:
        """Admit a request or raise LM-3001 / LM-3002 / LM-3003 (with Retry-After).

        It takes a slot of `bulkhead`'s in-flight cap (web actions: WEB, their own).

        `tokens_estimate` (prompt bound + max output tokens) is reserved in every scope's
        token count until the finish trues it up. `peek` names a hash whose fields the same
        round trip reads for another module (the breakers): they are the admission's
        `peeked`, None when Redis did not judge. `also`: more commands for that round trip
        (the response cache's lookup), their replies the admission's `also_replies`.
        """
        now = self._clock()
        window = int((now - self._epoch_s) // WINDOW_S)
        if window != self._window:
            self._new_window(window)
        resets_at = self._epoch_s + (window + 1) * WINDOW_S
        admission = Admission(
            request_id,
            group_id,
            scopes,
            window,
            False,
            bulkhead,
            tokens_estimate,
            resets_at=resets_at,
            clock=self._clock,
        )
        result = self._known_full(scopes, window)
        if result is None and self._shared.available:
            try:
                if window == self._resync_window or self._syncing is not None:
                    await self._resync(window)
                result = await self._admit_shared_within_shares(
                    admission, concurrency or 0, now, lease_s, peek, also
                )
            except SharedStateDown:
                result = None
        if result is None:
            result = self._admit_local(admission, concurrency or 0)
        code = result[0]
        if code == OK:
            counts = 2 + 2 * len(scopes)
            values = result[2:counts]
            admission.requests_used = [int(v) for v in values[0::2]]
            admission.tokens_used = [int(v) for v in values[1::2]]
            if peek is not None and admission.in_shared:
                admission.peeked = result[counts:]
            if admission.in_shared:
                self._saw(admission)
            return admission
        if admission.in_shared and code != CAP:
            self._saw_refusal(admission, code, scopes[result[1] - 1])
        retry_after = max(1, resets_at - int(now))
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
        which = "group concurrency cap" if result[1] else bulkhead.what
        raise errors.CapacityExhausted(f"The {which} is reached.", retry_after_s=1)

    def _known_full(self, scopes: tuple[Scope, ...], window: int) -> list[int] | None:
        """Refuse here what Redis is sure to refuse: the first limited scope's requests
        this window already reached its rpm in the fleet counts Redis returned (a window's
        request counts only grow), so a flood past its limit costs no round trip. Redis
        checks the scopes in order, RPM before TPM: a scope before it that is limited but
        not known full could refuse first, for another reason, so then Redis judges."""
        for index, scope in enumerate(scopes, start=1):
            if not (scope.rpm or scope.tpm):
                continue
            tally = self._tallies.get((scope.name, window))
            if scope.rpm and tally is not None and tally.seen_requests >= scope.rpm:
                return [RPM, index]
            return None
        return None

    async def finish(self, admission: Admission, *, tokens: int) -> None:
        """Release the slots and true up the reserved estimate to the answer's real tokens."""
        if admission.in_shared:
            try:
                await self._shared.run(*self.finish_commands(admission, tokens=tokens))
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
                await self._shared.run(
                    ("ZREM", keys[0], admission.request_id),
                    ("ZREM", keys[1], admission.request_id),
                )
            except SharedStateDown:
                pass  # the lease is the last safety net

        task = asyncio.get_running_loop().create_task(release())
        self._releases.add(task)
        task.add_done_callback(self._releases.discard)

    def finish_local(self, admission: Admission, *, tokens: int) -> None:
        """Finish in this process: a local admission, or a shared one Redis did not finish."""
        self._inflight.get(admission.bulkhead.name, set()).discard(admission.request_id)
        self._group_inflight.get(admission.group_id, set()).discard(admission.request_id)
        true_up = tokens - admission.tokens_estimate
        if admission.in_shared:
            # Redis failed the finish (it may have restarted: push what this process knows).
            # It holds the estimate and may yet run a finish that timed out: count only what
            # the estimate missed, never subtract twice.
            self._resync_window = max(self._resync_window, admission.window)
            true_up = max(0, true_up)
        elif admission.window == self._shares_window:
            self._true_up_shares(admission, true_up)
        if true_up:
            self._resync_window = max(self._resync_window, admission.window)
            for scope in admission.scopes:
                self._tally(scope.name, admission.window).alone_tokens += true_up

    # ---- Redis ----

    def _keys(self, admission: Admission) -> list[str]:
        keys = [admission.bulkhead.key, PREFIX + f"conc:{admission.group_id}"]
        for scope in admission.scopes:
            keys.append(f"{PREFIX}rpm:{scope.name}:{admission.window}")
            keys.append(f"{PREFIX}tpm:{scope.name}:{admission.window}")
        return keys

    async def _admit_shared_within_shares(
        self,
        admission: Admission,
        concurrency: int,
        now: float,
        lease_s: float,
        peek: Peek | None,
        also: tuple[tuple, ...] = (),
    ) -> list[int]:
        """Let Redis judge, within this process's shares if it judged this window alone."""
        held = admission.window == self._shares_window
        if held:
            refused = self._take_shares(admission)
            if refused is not None:
                return refused
        try:
            result = await self._admit_shared(admission, concurrency, now, lease_s, peek, also)
        except SharedStateDown:
            if held:
                self._give_back_shares(admission)
            raise
        if held and result[0] != OK:
            self._give_back_shares(admission)
        admission.in_shared = True
        return result

    async def _admit_shared(
        self,
        admission: Admission,
        concurrency: int,
        now: float,
        lease_s: float,
        peek: Peek | None,
        also: tuple[tuple, ...] = (),
    ) -> list[int]:
        args: list = [
            now,
            WINDOW_S * 2,
            admission.request_id,
            now + lease_s,
            admission.bulkhead.cap(),
            concurrency,
            len(admission.scopes),
        ]
        for scope in admission.scopes:
            args += [scope.rpm, scope.tpm]
        args.append(admission.tokens_estimate)
        keys = self._keys(admission)
        if peek is None:
            args.append(0)
        else:
            keys.append(peek[0])
            args += [len(peek[1]), *peek[1]]
        replies = await self._shared.run(ADMIT.command(keys, args), *also)
        if also:
            admission.also_replies = replies[1:]
        return replies[0]

    def _saw(self, admission: Admission) -> None:
        """Remember the fleet counts of limited scopes, for when Redis misses this window."""
        window = admission.window
        for scope, used, tokens in zip(
            admission.scopes, admission.requests_used, admission.tokens_used, strict=True
        ):
            if scope.rpm or scope.tpm:
                tally = self._tally(scope.name, window)
                if 2 * used < tally.seen_requests:
                    # A request count went back: Redis lost this window (a restart).
                    self._resync_window = window
                elif used > tally.seen_requests:
                    tally.seen_requests = used
                # Own reservation included; other replicas' true-ups are not seen here.
                tally.seen_tokens = tokens + admission.tokens_estimate

    def _saw_refusal(self, admission: Admission, code: int, scope: Scope) -> None:
        """Remember that Redis found a scope full: alone, this process admits none of it."""
        tally = self._tally(scope.name, admission.window)
        if code == RPM:
            tally.seen_requests = max(tally.seen_requests, scope.rpm)
        else:
            tally.seen_tokens = max(tally.seen_tokens, scope.tpm)

    async def _resync(self, window: int) -> None:
        """Push what this process counted alone in `window` before Redis judges again.

        One task at a time; admissions arriving meanwhile wait for it, so none is judged by
        a Redis that misses these counts.
        """
        if self._syncing is None:
            self._syncing = asyncio.get_running_loop().create_task(self._push_tallies(window))
            self._syncing.add_done_callback(self._sync_done)
        await asyncio.shield(self._syncing)

    def _sync_done(self, task: asyncio.Task) -> None:
        if self._syncing is task:
            self._syncing = None
        if not task.cancelled():
            task.exception()  # retrieved: each admission that waited had it raised

    async def _push_tallies(self, window: int) -> None:
        self._resync_window = -1  # counted alone from now on: pushed by the next resync
        slots = [(name, t) for (name, w), t in self._tallies.items() if w == window]
        for start in range(0, len(slots), SYNC_SLOTS_PER_CALL):
            chunk = slots[start : start + SYNC_SLOTS_PER_CALL]
            keys: list[str] = []
            args: list[int] = [WINDOW_S * 2]
            taken: list[tuple[int, int]] = []
            for name, tally in chunk:
                keys += [f"{PREFIX}rpm:{name}:{window}", f"{PREFIX}tpm:{name}:{window}"]
                args += [tally.seen_requests, tally.alone_requests]
                args += [tally.seen_tokens, tally.alone_tokens]
                taken.append((tally.alone_requests, tally.alone_tokens))
                tally.alone_requests = tally.alone_tokens = 0
            try:
                [counts] = await self._shared.run(SYNC.command(keys, args))
            except SharedStateDown:
                # Not pushed (or not known to be): keep them for the next try. Pushed twice
                # at worst, which only counts too much.
                for (_, tally), (requests, tokens) in zip(chunk, taken, strict=True):
                    tally.alone_requests += requests
                    tally.alone_tokens += tokens
                self._resync_window = max(self._resync_window, window)
                raise
            for (_, tally), used, tokens in zip(chunk, counts[0::2], counts[1::2], strict=True):
                tally.seen_requests = max(tally.seen_requests, int(used))
                tally.seen_tokens = int(tokens)

    def finish_commands(self, admission: Admission, *, tokens: int) -> list[tuple]:
        """The Redis commands that finish an admission (sent with others: gateway/recording.py)."""
        keys = self._keys(admission)
        commands: list[tuple] = [
            ("ZREM", keys[0], admission.request_id),
            ("ZREM", keys[1], admission.request_id),
        ]
        true_up = tokens - admission.tokens_estimate  # negative when the estimate was high
        if true_up:
            for tpm_key in keys[3::2]:
                commands.append(("INCRBY", tpm_key, true_up))
                commands.append(("EXPIRE", tpm_key, WINDOW_S * 2))
            if admission.window == self._shares_window:
                self._true_up_shares(admission, true_up)
        return commands

    # ---- per-process fallback ----

    def _tally(self, name: str, window: int) -> Tally:
        return self._tallies.setdefault((name, window), Tally())

    def _new_window(self, window: int) -> None:
        """Drop tallies of windows no admission or finish can reach any more."""
        self._window = window
        self._tallies = {k: v for k, v in self._tallies.items() if k[1] >= window - 1}

    def _take_shares(self, admission: Admission) -> list[int] | None:
        """Count a request against this process's shares of a window it judged alone, or
        return the refusal: Redis is back, but what other replicas admitted alone may not be."""
        for index, scope in enumerate(admission.scopes, start=1):
            tally = self._tallies.get((scope.name, admission.window))
            over = tally.over_share(scope) if tally is not None and tally.shared_out else OK
            if over != OK:
                return [over, index]
        self._count_shares(admission, 1)
        return None

    def _give_back_shares(self, admission: Admission) -> None:
        self._count_shares(admission, -1)

    def _count_shares(self, admission: Admission, sign: int) -> None:
        for scope in admission.scopes:
            tally = self._tallies.get((scope.name, admission.window))
            if tally is not None and tally.shared_out:
                tally.own_requests += sign
                tally.own_tokens += sign * admission.tokens_estimate

    def _true_up_shares(self, admission: Admission, true_up: int) -> None:
        for scope in admission.scopes:
            tally = self._tallies.get((scope.name, admission.window))
            if tally is not None and tally.shared_out:
                tally.own_tokens += true_up

    def _admit_local(self, admission: Admission, concurrency: int) -> list[int]:
        window = admission.window
        self._resync_window = max(self._resync_window, window)
        self._shares_window = max(self._shares_window, window)
        replicas = self._replicas
        tallies = [self._tally(scope.name, window) for scope in admission.scopes]
        for index, (scope, tally) in enumerate(zip(admission.scopes, tallies, strict=True), 1):
            if not tally.shared_out:
                tally.share_out(scope, replicas)
            refused = tally.over_share(scope)
            if refused:
                return [refused, index]
        inflight = self._inflight.setdefault(admission.bulkhead.name, set())
        cap = admission.bulkhead.cap()
        if cap and len(inflight) >= cap // replicas:
            return [CAP, 0]
        group_set = self._group_inflight.setdefault(admission.group_id, set())
        if concurrency and len(group_set) >= concurrency // replicas:
            return [CAP, 1]
        out = [OK, 0]
        for tally in tallies:
            tally.own_requests += 1
            tally.alone_requests += 1
            out += [
                tally.seen_requests + tally.alone_requests,
                tally.seen_tokens + tally.alone_tokens,
            ]
            tally.own_tokens += admission.tokens_estimate
            tally.alone_tokens += admission.tokens_estimate
        inflight.add(admission.request_id)
        group_set.add(admission.request_id)
        return out
