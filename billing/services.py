"""Control-plane writes of money: wallets, top-ups and corrections, tenant provisioning,
budget periods' rollover and spend alerts' delivery bookkeeping.

A balance changes only through a billing/ledger/ step (here `credit_wallet`); the request
path runs them through billing/escrow.py, settlement on stored usage rows through
billing/settlement.py, the reaper is billing/reaper.py, reconciliation billing/reconcile.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from accounts.members import record_member
from accounts.models import Account, ApiKey, Group, Membership
from accounts.services import (
    account_create,
    api_key_create,
    group_create,
)
from accounts.tokens import tenant_token_create
from audit import services as audit
from audit.actors import Actor, Kind
from billing.ledger.periods import roll_periods
from billing.ledger.wallet import credit_wallet
from billing.models import BudgetAlert, LedgerEntry, Wallet
from core.sqlexec import run_sync

# ---- wallets (control plane) ----


@transaction.atomic
def wallet_open(*, account: Account, opening_micro: int = 0, actor: Actor | None = None) -> Wallet:
    wallet, _ = Wallet.objects.get_or_create(account=account)
    if opening_micro:
        wallet_credit(
            wallet=wallet,
            amount_micro=opening_micro,
            kind=LedgerEntry.Kind.OPENING,
            reason="opening balance",
            actor=actor,
        )
    return wallet


def wallet_credit(
    *,
    wallet: Wallet,
    amount_micro: int,
    kind: str = LedgerEntry.Kind.TOPUP,
    reason: str = "",
    actor: Actor | str | None = None,
) -> LedgerEntry:
    """Add to (or, negative, correct) a wallet's balance with a ledger entry, and its audit
    entry (`wallet.<kind>`) in the same transaction.

    `actor` as a plain string is an operator's username (the earlier form). The ledger
    entry keeps an operator's username. Raises billing.ledger.sql.Refused if a correction would
    take it below what it holds.
    """
    if isinstance(actor, str):
        actor = Actor(Kind.OPERATOR, actor) if actor else None
    operator = actor.label if actor is not None and actor.kind == Kind.OPERATOR else ""
    with transaction.atomic():
        entry_id = run_sync(
            credit_wallet(
                wallet.pk,
                amount_micro=amount_micro,
                kind=kind,
                reason=reason,
                now=timezone.now(),
                actor=operator,
            )
        )
        entry = LedgerEntry.objects.get(pk=entry_id)
        audit.record(
            actor=actor,
            action=f"wallet.{str(kind)}",
            account_id=wallet.account_id,
            target_type="wallet",
            target_id=wallet.pk,
            target_label=f"wallet of account {wallet.account_id}",
            before={"balance_micro": entry.balance_after_micro - amount_micro},
            after={
                "balance_micro": entry.balance_after_micro,
                "amount_micro": amount_micro,
                "reason": reason,
                "ledger_entry": entry.pk,
            },
        )
    return entry


# ---- provisioning: a tenant arrives with its wallet ----


@dataclass(frozen=True)
class ProvisionedTenant:
    account: Account
    group: Group
    api_key: ApiKey
    api_key_secret: str
    api_token_secret: str
    username: str

    def as_json(self) -> dict:
        return {
            "account_id": self.account.pk,
            "group_id": self.group.pk,
            "api_key_id": self.api_key.pk,
            "api_key": self.api_key_secret,
            "api_token": self.api_token_secret,
            "username": self.username,
            "billing_mode": self.account.billing_mode,
        }


@transaction.atomic
def tenant_provision(
    *,
    name: str,
    budget_max_micro: int | None = None,
    wallet_micro: int = 0,
    invoiced: bool = False,
    actor: Actor | None = None,
) -> ProvisionedTenant:
    """Create an account, its owner with a tenant token, a group, a key and a wallet."""
    account = account_create(
        name=name,
        billing_mode=Account.BillingMode.INVOICED if invoiced else Account.BillingMode.PREPAID,
        actor=actor,
    )
    username = f"{name}-owner"
    user = get_user_model().objects.create_user(username=username)
    owner = Membership.objects.create(account=account, user=user, role=Membership.Role.OWNER)
    record_member(
        owner,
        action="member.add",
        actor=actor,
        before={},
        after={"user": username, "role": Membership.Role.OWNER},
    )
    _, token_secret = tenant_token_create(user=user, actor=actor)
    group = group_create(
        account=account, name="default", budget_max_micro=budget_max_micro, actor=actor
    )
    api_key, key_secret = api_key_create(group=group, name="default", actor=actor)
    wallet_open(account=account, opening_micro=wallet_micro, actor=actor)
    return ProvisionedTenant(
        account=account,
        group=group,
        api_key=api_key,
        api_key_secret=key_secret,
        api_token_secret=token_secret,
        username=username,
    )


# ---- budget periods and spend alerts ----

ROLL_BATCH = 500


def budget_periods_roll(*, now: datetime | None = None) -> int:
    """Roll every group and key whose budget period ended (billing.ledger.periods.roll_periods), a
    batch per transaction; return how many were rolled."""
    now = now or timezone.now()
    rolled = 0
    while True:
        done = run_sync(roll_periods(now=now, limit=ROLL_BATCH))
        rolled += done
        if done < ROLL_BATCH:
            return rolled


def budget_alerts_due(*, now: datetime, limit: int) -> list[tuple[int, datetime | None]]:
    """Return (id, next_attempt_at) of the pending alerts due for a delivery try, oldest first."""
    return list(
        BudgetAlert.objects.filter(delivery=BudgetAlert.Delivery.PENDING)
        .filter(Q(next_attempt_at__isnull=True) | Q(next_attempt_at__lte=now))
        .order_by("id")
        .values_list("pk", "next_attempt_at")[:limit]
    )


def budget_alert_claim(
    *, alert_id: int, due_at: datetime | None, now: datetime, lease_s: int
) -> bool:
    """Take an alert for one delivery try; False if another sender took it first."""
    due = Q(next_attempt_at__isnull=True) if due_at is None else Q(next_attempt_at=due_at)
    return bool(
        BudgetAlert.objects.filter(due, pk=alert_id, delivery=BudgetAlert.Delivery.PENDING).update(
            next_attempt_at=now + timedelta(seconds=lease_s)
        )
    )


def budget_alert_tried(
    *,
    alert_id: int,
    attempts: int,
    error: str = "",
    retry_at: datetime | None = None,
) -> str:
    """Record a delivery try: delivered (no error), pending again until `retry_at`, or failed
    for good (an error and no `retry_at`); return the delivery state."""
    if not error:
        state, fields = BudgetAlert.Delivery.DELIVERED, {"delivered_at": timezone.now()}
    elif retry_at is not None:
        state, fields = BudgetAlert.Delivery.PENDING, {}
    else:
        state, fields = BudgetAlert.Delivery.FAILED, {}
    BudgetAlert.objects.filter(pk=alert_id).update(
        delivery=state,
        delivery_attempts=attempts,
        last_error=error[:200],
        next_attempt_at=retry_at,
        **fields,
    )
    return state
