"""Tag budgets: an account's budget per request tag and period (billing.models.TagBudget).

Every change is on the audit trail and live on every gateway replica when it returns: the
gateway reads an account's tag budgets with its keys (gateway/auth.py), so a change evicts
the account's cached keys over the config bus. The hold and its release are the ledger's
(billing/tag_ledger.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from accounts.models import Account, Period
from accounts.periods import period_key
from accounts.services import account_changed
from audit import services as audit
from audit.actors import Actor
from billing.models import TagBudget, TagSpend
from core.tags import clean_tag

AUDITED = ("tag", "budget_max_micro", "budget_period")
TAG_BUDGETS_MAX = 200  # per account: the gateway keeps them all with each key


class TagBudgetError(ValueError):
    """A tag budget that cannot be: the message says why."""


@dataclass(frozen=True, slots=True)
class TagBudgetView:
    """A tag budget with its current period's spend."""

    budget: TagBudget
    period: str
    spent_micro: int
    reserved_micro: int


def tag_budgets_of_user(*, user) -> QuerySet[TagBudget]:
    return TagBudget.objects.filter(account__memberships__user=user).order_by("id")


def with_spend(budgets: list[TagBudget]) -> list[TagBudgetView]:
    """Each budget with what its tag spent and holds in the current period (one query)."""
    now = timezone.now()
    keys = {b.pk: period_key(b.budget_period, b.account.time_zone, now) for b in budgets}
    spends = {
        (s.account_id, s.tag, s.period): s
        for s in TagSpend.objects.filter(
            account_id__in={b.account_id for b in budgets},
            tag__in={b.tag for b in budgets},
            period__in=set(keys.values()),
        )
    }
    views = []
    for b in budgets:
        spend = spends.get((b.account_id, b.tag, keys[b.pk]))
        views.append(
            TagBudgetView(
                b,
                keys[b.pk],
                spend.spent_micro if spend else 0,
                spend.reserved_micro if spend else 0,
            )
        )
    return views


def _audited(budget: TagBudget) -> dict:
    return {name: getattr(budget, name) for name in AUDITED}


def _record(action: str, budget: TagBudget, actor: Actor | None, **change: dict) -> None:
    (audit.record_change if action.endswith("update") else audit.record)(
        actor=actor,
        action=action,
        account_id=budget.account_id,
        target_type="tag_budget",
        target_id=budget.pk,
        target_label=budget.tag,
        **change,
    )


def tag_budget_create(
    *,
    account: Account,
    tag: str,
    budget_max_micro: int,
    budget_period: str = Period.MONTHLY,
    actor: Actor | None = None,
) -> TagBudget:
    """Give a tag of the account a budget (TagBudgetError: a bad tag, or one with a budget
    already); live on every replica when this returns."""
    try:
        tag = clean_tag(tag)
    except ValueError as exc:
        raise TagBudgetError(str(exc)) from None
    if TagBudget.objects.filter(account=account, tag=tag).exists():
        raise TagBudgetError(f"Tag {tag!r} has a budget already.")
    if TagBudget.objects.filter(account=account).count() >= TAG_BUDGETS_MAX:
        raise TagBudgetError(f"At most {TAG_BUDGETS_MAX} tag budgets per account.")
    budget = TagBudget(
        account=account, tag=tag, budget_max_micro=budget_max_micro, budget_period=budget_period
    )
    with transaction.atomic():
        budget.save()
        _record("tag_budget.create", budget, actor, after=_audited(budget))
    account_changed(account_id=account.pk)
    return budget


def tag_budget_update(
    *, budget: TagBudget, actor: Actor | None = None, **fields: object
) -> TagBudget:
    """Change a tag budget's amount or period; live on every replica when this returns. A new
    period applies at once: spend is counted from the new period's row."""
    before = _audited(budget)
    for name, value in fields.items():
        setattr(budget, name, value)
    with transaction.atomic():
        budget.save(update_fields=[*fields] or None)
        _record("tag_budget.update", budget, actor, before=before, after=_audited(budget))
    account_changed(account_id=budget.account_id)
    return budget


def tag_budget_delete(*, budget: TagBudget, actor: Actor | None = None) -> None:
    """Remove a tag's budget (its spend rows stay, for the record); live on every replica when
    this returns. Holds already taken on it are released and charged as usual."""
    account_id = budget.account_id
    with transaction.atomic():
        _record("tag_budget.delete", budget, actor, before=_audited(budget))
        budget.delete()
    account_changed(account_id=account_id)
