"""The usage rows of requests whose gateway died: charged at their hold, then perhaps trued up.

A request whose usage row never arrived is charged at its hold by the reaper
(billing/reaper.py), which hands it here in the same transaction (billing.feed's
`record_crash_charge`): it becomes a usage row marked `unmeasured`, with that charge and no
tokens, dated when it was charged (its receipt's time: never the request's own, which its
late row carries), so the tenant's usage (the API, the CSV export, the dashboard, the
totals) lists every request its receipts charge. If the request's own row arrives later,
settling it trues the charge up to what it measured (billing.ledger.settle.true_up); the writer
then puts the late row in place of the unmeasured one, marked `trueup` (`true_up_rows`),
in the same transaction. The rollups follow both, so totals stay equal to the rows.

Usage events and bandwidth reconciliation read these charges from billing's receipts and
markers, not from the unmeasured rows (usage/services.py leaves those out).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from django.db.models import Q

from billing.feed import CrashCharge
from core.usage_record import LOG_FIELDS, UsageRecord
from usage.models import Measurement, UsageLog
from usage.rollups import add_to_rollups
from usage.storage import insert_new

# What an unmeasured row says it was: a platform call was sent (only then is a hold charged),
# and no answer was recorded.
NO_STATUS = 0


def crash_record(charge: CrashCharge) -> UsageRecord:
    """The usage record of a request the reaper charged at its hold: that charge, no tokens."""
    return UsageRecord(
        request_id=charge.request_id,
        client_request_id="",
        created_at=charge.charged_at,
        account_id=charge.account_id,
        group_id=charge.group_id,
        api_key_id=charge.api_key_id,
        caller_label="",
        endpoint="",
        model_requested="",
        model_served="",
        provider="",
        served_by="platform",
        tokens_in=0,
        tokens_out=0,
        byok_tokens_in=0,
        byok_tokens_out=0,
        provider_cost_micro=charge.cost_micro,
        bytes_in=0,
        bytes_out=0,
        bandwidth_charge_micro=charge.bandwidth_micro,
        upstream_sent=True,
        status=NO_STATUS,
        error_code="",
        latency_ms=0,
        ttft_ms=None,
        streamed=False,
        reservation_id=None,
    )


def store_crash_charge(charge: CrashCharge, *, now: datetime) -> bool:
    """Store the unmeasured row of a request the reaper charged, with its rollups, in the
    caller's transaction; False when it is stored already."""
    record = crash_record(charge)
    if not insert_new([record], stored_at=now):
        return False
    UsageLog.objects.filter(request_id=record.request_id, created_at=record.created_at).update(
        measurement=Measurement.UNMEASURED
    )
    add_to_rollups([record])
    return True


def _record_of(row: UsageLog) -> UsageRecord:
    return UsageRecord(**{name: getattr(row, name) for name in LOG_FIELDS})


def true_up_rows(records: Iterable[UsageRecord], trued: set[str]) -> None:
    """Put freshly stored late rows in place of the unmeasured rows of their requests (the
    reaper charged them at the hold, settling them trued that up), in the caller's
    transaction: the unmeasured rows leave the log and the rollups, the late ones say `trueup`."""
    if not trued:
        return
    ids = sorted(trued)
    gone = list(UsageLog.objects.filter(request_id__in=ids, measurement=Measurement.UNMEASURED))
    if gone:
        add_to_rollups([_record_of(row) for row in gone], sign=-1)
        UsageLog.objects.filter(request_id__in=ids, pk__in=[row.pk for row in gone]).delete()
    late = Q()
    for record in records:
        if record.request_id in trued:
            late |= Q(request_id=record.request_id, created_at=record.created_at)
    UsageLog.objects.filter(late).update(measurement=Measurement.TRUEUP)
