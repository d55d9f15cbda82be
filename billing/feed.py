"""What billing's periodic work needs from the usage log, which billing never imports.

Two of billing's jobs depend on usage rows. The reaper first has every journaled row stored:
each is settled at its measured cost as it is stored (billing/settlement.py), so only the
requests whose row never arrived are left to charge at their hold; each of those is given
an unmeasured usage row in its charge's transaction (`record_crash_charge`). Reconciliation
is handed, once per closed window, the rows whose charge may be off. Usage owns those rows,
their journal and the windows' cursor, and usage depends on billing, never the reverse: so
usage registers its side of `UsageFeed` when Django loads the apps (usage/apps.py), and billing's
jobs ask for it here (`usage_feed`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Protocol

from django.core.exceptions import ImproperlyConfigured

if TYPE_CHECKING:
    from billing.reconcile import Drift


@dataclass(frozen=True, slots=True)
class LoggedCharge:
    """What one stored usage row says its request was charged."""

    request_id: str
    group_id: int
    api_key_id: int | None
    bandwidth_micro: int
    cost_micro: int
    marked_bandwidth_micro: int | None  # the marker's bandwidth when read; None: no marker


@dataclass(frozen=True, slots=True)
class CrashCharge:
    """A request the reaper charged at its hold because its usage row never arrived."""

    request_id: str
    account_id: int
    group_id: int
    api_key_id: int | None
    cost_micro: int
    bandwidth_micro: int
    # When the reaper charged it. Its usage row is dated so, never at the request's own
    # time: a late row of the request must not meet it on the log's (request_id, created_at).
    charged_at: datetime


class WindowReconciler(Protocol):
    def __call__(
        self,
        *,
        window_start: datetime,
        rows: list[LoggedCharge],
        logged_by_group: dict[int, int],
    ) -> list[Drift]: ...


class UsageFeed(Protocol):
    def store_journaled(self) -> int:
        """Store every journaled usage row (settling each); return how many were new."""
        ...

    def record_crash_charge(self, charge: CrashCharge, *, now: datetime) -> None:
        """Give a request the reaper charged its usage row (unmeasured), in the caller's
        transaction: the tenant's usage lists every request charged, as its receipts do."""
        ...

    def reconcile_windows(
        self, reconcile: WindowReconciler, *, now: datetime | None = None
    ) -> list[Drift]:
        """Call `reconcile` once on each closed window not reconciled yet, in order, with the
        window's rows whose charge may be off and the bandwidth its rows say each of their
        groups was charged; return the drift it found."""
        ...


_feed: UsageFeed | None = None


def usage_feed_register(feed: UsageFeed) -> None:
    """Make `feed` the usage log billing's jobs read (usage's AppConfig.ready calls this)."""
    global _feed
    _feed = feed


def usage_feed() -> UsageFeed:
    if _feed is None:
        raise ImproperlyConfigured("no usage feed registered: is `usage` in INSTALLED_APPS?")
    return _feed
