"""Writes of money. Each changes balances only by atomic conditional UPDATEs or row locks.

Request-path entry points (sync; the gateway calls them from a worker thread):
- spend_hold_take / spend_hold_release: the budget hold on group and key at request start;
- reservation_take / reservation_commit / reservation_cancel: wallet escrow per attempt;
- request_settle: one transaction that releases the hold, adds spent / settled, and commits
  the escrow at measured cost.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from accounts.models import Account, ApiKey, Group
from billing.models import LedgerEntry, Reservation, SpendHold, Wallet


class Refused(Exception):
    """A money step was refused: the budget or wallet cannot cover it."""


# ---- wallets (control plane) ----


@transaction.atomic
def wallet_open(*, account: Account, opening_micro: int = 0) -> Wallet:
    wallet, _ = Wallet.objects.get_or_create(account=account)
    if opening_micro:
        wallet_credit(
            wallet=wallet,
            amount_micro=opening_micro,
            kind=LedgerEntry.Kind.OPENING,
            reason="opening balance",
        )
    return wallet


@transaction.atomic
def wallet_credit(
    *, wallet: Wallet, amount_micro: int, kind: str = LedgerEntry.Kind.TOPUP, reason: str = ""
) -> LedgerEntry:
    """Add to (or, negative, correct) a wallet's balance with a ledger entry."""
    locked = Wallet.objects.select_for_update().get(pk=wallet.pk)
    if locked.balance_micro + amount_micro < locked.reserved_micro:
        raise Refused("the correction would take the wallet below its holds")
    locked.balance_micro += amount_micro
    locked.updated_at = timezone.now()
    locked.save(update_fields=["balance_micro", "updated_at"])
    return LedgerEntry.objects.create(
        wallet=locked,
        kind=kind,
        amount_micro=amount_micro,
        balance_after_micro=locked.balance_micro,
        reason=reason,
    )


# ---- budget holds (request path) ----


def spend_hold_take(
    *,
    request_id: str,
    group_id: int,
    api_key_id: int | None,
    amount_micro: int,
    key_has_budget: bool,
    ttl_s: int,
) -> None:
    """Hold `amount_micro` on the group (and key) or refuse when the budget cannot take it.

    Refused when spent + reserved >= budget_max (zero credit is a hard stop, even for a
    zero estimate) or when the hold would pass budget_max.
    """

    spent_and_held = F("spent_micro") + F("reserved_micro")
    room = Q(budget_max_micro__isnull=True) | (
        Q(budget_max_micro__gt=spent_and_held)
        & Q(budget_max_micro__gte=spent_and_held + amount_micro)
    )
    hold = F("reserved_micro") + amount_micro
    with transaction.atomic():
        if not Group.objects.filter(room, pk=group_id).update(reserved_micro=hold):
            raise Refused("group budget")
        key_held = key_has_budget and api_key_id is not None
        if key_held and not ApiKey.objects.filter(room, pk=api_key_id).update(reserved_micro=hold):
            raise Refused("key budget")
        SpendHold.objects.create(
            request_id=request_id,
            group_id=group_id,
            api_key_id=api_key_id if key_has_budget else None,
            amount_micro=amount_micro,
            expires_at=timezone.now() + timedelta(seconds=ttl_s),
        )


def _release_hold(hold: SpendHold, status: str) -> None:
    Group.objects.filter(pk=hold.group_id).update(
        reserved_micro=F("reserved_micro") - hold.amount_micro
    )
    if hold.api_key_id is not None:
        ApiKey.objects.filter(pk=hold.api_key_id).update(
            reserved_micro=F("reserved_micro") - hold.amount_micro
        )
    SpendHold.objects.filter(pk=hold.pk).update(status=status)


# ---- escrow (request path) ----


def reservation_take(
    *, account_id: int, request_id: str, amount_micro: int, ttl_s: int, attempt_no: int = 1
) -> int:
    """Hold `amount_micro` on the account's wallet; refuse if available would go below 0."""
    with transaction.atomic():
        updated = Wallet.objects.filter(
            account_id=account_id,
            balance_micro__gte=F("reserved_micro") + amount_micro,
        ).update(reserved_micro=F("reserved_micro") + amount_micro, updated_at=timezone.now())
        if not updated:
            raise Refused("wallet")
        wallet_id = Wallet.objects.values_list("pk", flat=True).get(account_id=account_id)
        reservation = Reservation.objects.create(
            wallet_id=wallet_id,
            request_id=request_id,
            attempt_no=attempt_no,
            amount_micro=amount_micro,
            expires_at=timezone.now() + timedelta(seconds=ttl_s),
        )
    return reservation.pk


def _resolve_reservation(reservation_id: int, *, status: str, cost_micro: int = 0) -> bool:
    """Resolve a pending reservation exactly once; return False if it was already resolved."""
    now = timezone.now()
    reservation = (
        Reservation.objects.select_for_update()
        .filter(pk=reservation_id, status=Reservation.Status.PENDING)
        .first()
    )
    if reservation is None:
        return False
    debit = (
        min(cost_micro, reservation.amount_micro) if status == Reservation.Status.COMMITTED else 0
    )
    Reservation.objects.filter(pk=reservation.pk).update(
        status=status,
        committed_micro=debit,
        excess_micro=max(0, cost_micro - reservation.amount_micro) if debit else 0,
        resolved_at=now,
    )
    Wallet.objects.filter(pk=reservation.wallet_id).update(
        reserved_micro=F("reserved_micro") - reservation.amount_micro,
        balance_micro=F("balance_micro") - debit,
        updated_at=now,
    )
    if status == Reservation.Status.COMMITTED:
        balance = Wallet.objects.values_list("balance_micro", flat=True).get(
            pk=reservation.wallet_id
        )
        LedgerEntry.objects.create(
            wallet_id=reservation.wallet_id,
            kind=LedgerEntry.Kind.COMMIT,
            amount_micro=-debit,
            balance_after_micro=balance,
            reservation_id=reservation.pk,
            reason=f"request {reservation.request_id}",
        )
    return True


def reservation_cancel(*, reservation_id: int) -> bool:
    with transaction.atomic():
        return _resolve_reservation(reservation_id, status=Reservation.Status.CANCELLED)


# ---- settlement (request path) ----


@dataclass(frozen=True, slots=True)
class Settlement:
    request_id: str
    group_id: int
    api_key_id: int | None
    provider_cost_micro: int  # platform-served token cost (0 for team-served)
    bandwidth_charge_micro: int
    hold_taken: bool
    reservation_id: int | None


def request_settle(s: Settlement) -> None:
    """Release the hold, add spent / settled, commit the escrow: one transaction."""
    spent = s.provider_cost_micro + s.bandwidth_charge_micro
    with transaction.atomic():
        if s.hold_taken:
            hold = (
                SpendHold.objects.select_for_update()
                .filter(request_id=s.request_id, status=SpendHold.Status.HELD)
                .first()
            )
            if hold is not None:
                _release_hold(hold, SpendHold.Status.SETTLED)
        if spent:
            Group.objects.filter(pk=s.group_id).update(
                spent_micro=F("spent_micro") + spent,
                settled_micro=F("settled_micro") + s.provider_cost_micro,
            )
            if s.api_key_id is not None:
                ApiKey.objects.filter(pk=s.api_key_id).update(spent_micro=F("spent_micro") + spent)
        if s.reservation_id is not None:
            _resolve_reservation(
                s.reservation_id,
                status=Reservation.Status.COMMITTED,
                cost_micro=s.provider_cost_micro,
            )


# ---- the reaper (periodic task) ----


def expire_stale_holds(*, now=None) -> tuple[int, int]:
    """Release reservations and spend holds past their expiry; return how many of each."""
    now = now or timezone.now()
    reservations = 0
    for reservation_id in Reservation.objects.filter(
        status=Reservation.Status.PENDING, expires_at__lt=now
    ).values_list("pk", flat=True):
        with transaction.atomic():
            reservations += _resolve_reservation(reservation_id, status=Reservation.Status.EXPIRED)
    holds = 0
    for hold_id in SpendHold.objects.filter(
        status=SpendHold.Status.HELD, expires_at__lt=now
    ).values_list("pk", flat=True):
        with transaction.atomic():
            hold = (
                SpendHold.objects.select_for_update()
                .filter(pk=hold_id, status=SpendHold.Status.HELD)
                .first()
            )
            if hold is not None:
                _release_hold(hold, SpendHold.Status.EXPIRED)
                holds += 1
    return reservations, holds


# ---- billing settings (control plane) ----


def account_billing_changed(*, account: Account) -> int:
    """Push floor(customer price / markup) to every group of the account; return the rate."""
    from accounts.services import account_bandwidth_rate_micro, group_changed

    rate = account_bandwidth_rate_micro(account=account)
    groups = list(Group.objects.filter(account=account))
    Group.objects.filter(account=account).update(bandwidth_micro_usd_per_gb=rate)
    for group in groups:
        group_changed(group=group)
    return rate


def account_billing_update(*, account: Account, price_micro_per_gb: int, markup_bp: int) -> int:
    if price_micro_per_gb < 0 or markup_bp < 1:
        raise ValueError("price must be >= 0 and markup >= 1 basis point")
    account.bandwidth_price_micro_per_gb = price_micro_per_gb
    account.markup_bp = markup_bp
    account.save(update_fields=["bandwidth_price_micro_per_gb", "markup_bp"])
    return account_billing_changed(account=account)
