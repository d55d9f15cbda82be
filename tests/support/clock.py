"""A clock the test moves, for components that take `clock: Callable[[], float]`."""

from __future__ import annotations

# A minute boundary (30,000,000 x 60 s), so window arithmetic reads plainly in the tests.
START_S = 1_800_000_000.0


class FakeClock:
    """Stand in for time.time: it reads `now`, which only the test moves."""

    def __init__(self, start_s: float = START_S) -> None:
        self.now = start_s

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds

    def at(self, offset_s: float) -> None:
        """Move to `offset_s` seconds past START_S."""
        self.now = START_S + offset_s
