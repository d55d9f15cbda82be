"""The one-minute rate windows of a fleet the test starts, owned by the test.

Gateways count their rate windows (limits and failed key lookups) from
TOLLGATE_RATE_EPOCH_S. A test that starts its fleet with `RateWindow.fresh().env` owns the
fleet's first window from the moment it is taken: its requests fall in one window, with no
wait for the wall-clock minute to have room, as long as the test is done within 60 s.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

WINDOW_S = 60  # gateway.limits.WINDOW_S, gateway.auth.FAIL_WINDOW_S


@dataclass(frozen=True)
class RateWindow:
    epoch_s: int

    @classmethod
    def fresh(cls) -> RateWindow:
        """Take a window that starts now (its epoch is never in the future)."""
        return cls(epoch_s=int(time.time()))

    @property
    def env(self) -> dict[str, str]:
        """The environment a fleet of gateways shares to count windows from this epoch."""
        return {"TOLLGATE_RATE_EPOCH_S": str(self.epoch_s)}

    def number(self) -> int:
        """Return the number of the window the fleet is in now (0 for the first)."""
        return int((time.time() - self.epoch_s) // WINDOW_S)

    def seconds_left(self) -> float:
        """Return how long the current window still runs."""
        return WINDOW_S - (time.time() - self.epoch_s) % WINDOW_S
