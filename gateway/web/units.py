"""The group's daily web unit budget, in Redis: checked before every web vendor call.

Each call takes the unit it may bill before it is made (refused, LM-3004, when the day's
units are used up, with Retry-After to the next UTC midnight) and gives it back when it
billed nothing, so concurrent requests of one group never pass the cap together. The
counter is per (group, UTC day) and expires two days later.

Without Redis (embedded runs, or Redis down) each process counts alone: the budget then
bounds each replica, not the fleet; money stays bounded by the budgets and wallet, which
live in PostgreSQL.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from core.errors import DailyUnitsExhausted
from core.shared_state import Script, SharedState, SharedStateDown

log = logging.getLogger(__name__)
PREFIX = "tollgate:wu:"
TTL_S = 2 * 86_400

# KEYS[1] the day's counter. ARGV: units, cap. Returns the count after, or -1 (refused).
TAKE = Script("""
local units, cap = tonumber(ARGV[1]), tonumber(ARGV[2])
local used = tonumber(redis.call('GET', KEYS[1]) or '0')
if used + units > cap then return -1 end
local now = redis.call('INCRBY', KEYS[1], units)
redis.call('EXPIRE', KEYS[1], ARGV[3])
return now
""")


def day_of(now: float) -> str:
    return datetime.fromtimestamp(now, UTC).strftime("%Y%m%d")


def seconds_to_next_day(now: float) -> int:
    today = datetime.fromtimestamp(now, UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    return max(1, int((today + timedelta(days=1)).timestamp() - now))


@dataclass(frozen=True, slots=True)
class Taken:
    key: str
    units: int
    local: bool  # counted in this process (Redis was not there)


class DailyUnits:
    def __init__(self, shared: SharedState, *, clock=time.time) -> None:
        self.shared = shared
        self.clock = clock
        self._local: dict[str, int] = {}  # key -> units, when Redis is not there

    async def take(self, group_id: int, cap: int | None, units: int = 1) -> Taken | None:
        """Take units of today's budget, or raise LM-3004 when they do not fit; return what
        to give back if the call bills nothing (None: the group has no cap)."""
        if cap is None:
            return None
        now = self.clock()
        key = f"{PREFIX}{group_id}:{day_of(now)}"
        if self.shared.available:
            try:
                [used] = await self.shared.run(TAKE.command([key], [units, cap, TTL_S]))
            except SharedStateDown:
                pass
            else:
                if used < 0:
                    raise _exhausted(cap, now)
                return Taken(key, units, local=False)
        if key not in self._local:  # a new day (or group): yesterday's counts are done with
            today = key.rsplit(":", 1)[1]
            self._local = {k: v for k, v in self._local.items() if k.endswith(today)}
        if self._local.get(key, 0) + units > cap:  # counted in this process alone
            raise _exhausted(cap, now)
        self._local[key] = self._local.get(key, 0) + units
        return Taken(key, units, local=True)

    async def give_back(self, taken: Taken | None) -> None:
        """Return units a call took but did not bill (to the counter they came from)."""
        if taken is None:
            return
        if taken.local:
            if taken.key in self._local:  # not a day already dropped
                self._local[taken.key] -= taken.units
            return
        try:
            await self.shared.run(("DECRBY", taken.key, taken.units))
        except SharedStateDown:
            log.warning("could not give back %d web unit(s) (%s)", taken.units, taken.key)


def _exhausted(cap: int, now: float) -> DailyUnitsExhausted:
    return DailyUnitsExhausted(
        f"The group's daily web unit budget of {cap} is used up; it renews at 00:00 UTC.",
        retry_after_s=seconds_to_next_day(now),
    )
