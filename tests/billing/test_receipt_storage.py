"""Receipts stored compactly and found by month in a binary search (issue 38, the proof at scale).

A body is packed (billing/receipt_codec.py) and reads back byte for byte; a receipt of a real
request takes at most 600 bytes on disk with its indexes (measured on 2,000); each body states
its chain's running totals, so a month's statement is two receipts apart and equals the sum
of the month's bodies; a month's page is a range of seqs.
"""

from __future__ import annotations

import zlib
from datetime import UTC, datetime

import orjson
import pytest
from django.db import connection

from accounts.models import Account
from billing import statements
from billing.models import Receipt
from billing.receipt_codec import DICTIONARY_V1, V1, pack, unpack
from billing.receipts import Draft, append, request_detail
from core.sqlexec import run_sync
from core.usage_record import UsageRecord
from tests.support.services import requires_postgres
from tests.support.tenants import make_tenant
from tests.support.usage import attempt, journal_row

PRICES = {
    "cache_read_micro_per_mtok": 75_000,
    "input_micro_per_mtok": 150_000,
    "output_micro_per_mtok": 600_000,
}


def real_draft(account_id: int, n: int, *, cost: int) -> Draft:
    """A platform-served chat request's receipt, as the writer drafts one."""
    row = journal_row(
        account_id=account_id,
        group_id=account_id * 10,
        api_key_id=account_id * 100,
        request_id=f"019ae{n:027x}",
        client_request_id=f"client-{n}",
        tokens_in=1_000 + n,
        tokens_out=200 + n % 50,
        provider_cost_micro=cost,
        bytes_in=1_500 + n,
        bytes_out=3_000 + n,
        bandwidth_charge_micro=1,
        prices=PRICES,
        attempts=[attempt()],
    )
    record = UsageRecord.from_json(orjson.dumps(row))
    return Draft(
        account_id=account_id,
        request_id=record.request_id,
        kind="charge",
        group_id=record.group_id,
        api_key_id=record.api_key_id,
        cost_micro=cost,
        bandwidth_micro=1,
        detail=request_detail(record),
        wallet_entries=(n,),
        wallet_taken_micro=cost,
    )


def test_a_packed_body_reads_back_byte_for_byte():
    text = '{"a":"' + "é" * 40 + '","seq":1}'
    packed = pack(text)
    assert packed[0] == 1 and unpack(packed) == text and unpack(memoryview(packed)) == text
    with pytest.raises(ValueError):
        unpack(b"\x09not a body")


def test_a_body_packed_with_the_earlier_32_kb_window_still_reads_back():
    # Receipts stored before the packer's window shrank to 4 KB were deflated with a 32 KB
    # window and mem level 9, primed with the same dictionary: they read back as they were.
    second = DICTIONARY_V1[DICTIONARY_V1.index(b'}{"account_id"') + 1 :].decode()
    text = second.replace('"seq":1', '"seq":48213').replace('"input":10', '"input":1234')
    earlier = zlib.compressobj(9, zlib.DEFLATED, -15, 9, zdict=DICTIONARY_V1)
    stored = bytes((V1,)) + earlier.compress(text.encode()) + earlier.flush()
    assert unpack(stored) == text
    assert unpack(pack(text)) == text and len(pack(text)) <= len(stored) + 8


@requires_postgres
@pytest.mark.django_db(transaction=True)
def test_a_receipt_takes_at_most_600_bytes_on_disk():
    account_id = make_tenant().account_id
    drafts = [real_draft(account_id, n, cost=4_000 + n) for n in range(20_000)]
    for first in range(0, len(drafts), 1_000):  # the writer's batches
        run_sync(append(drafts[first : first + 1_000], now=datetime.now(UTC)))
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE billing_receipt")
        cursor.execute(
            "SELECT pg_total_relation_size('billing_receipt'), count(*), avg(pg_column_size(body)),"
            " avg(octet_length(convert_to(body::text, 'UTF8')))"
            " FROM billing_receipt"
        )
        total_bytes, count, body_bytes, _ = cursor.fetchone()
    stored = Receipt.objects.filter(account_id=account_id).order_by("seq")
    assert count == 20_000 and stored.count() == 20_000
    text = stored.first().body
    assert len(text) > 1_200  # the JSON a tenant reads and hashes
    assert body_bytes < 250, body_bytes  # what is stored of it
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname, pg_relation_size(c.oid) FROM pg_class c"
            " WHERE c.relname LIKE 'billing_receipt%%' OR c.relname LIKE 'receipt_%%'"
        )
        sizes = dict(cursor.fetchall())
    assert total_bytes / count <= 600, (total_bytes / count, body_bytes, sorted(sizes.items()))


@pytest.mark.django_db(transaction=True)
def test_a_months_statement_and_pages_are_two_receipts_apart():
    tenant = make_tenant()
    account = Account.objects.get(pk=tenant.account_id)
    account.time_zone = "UTC"
    account.save(update_fields=["time_zone"])
    months = {
        datetime(2026, 9, 30, 23, 0, tzinfo=UTC): [101, 102],
        datetime(2026, 10, 15, 12, 0, tzinfo=UTC): [203, 204, 205],
        datetime(2026, 10, 31, 23, 59, tzinfo=UTC): [306],
        datetime(2026, 11, 1, 0, 0, tzinfo=UTC): [407, 408],
    }
    n = 0
    for moment, costs in months.items():
        drafts = []
        for cost in costs:
            n += 1
            drafts.append(real_draft(account.pk, n, cost=cost))
        run_sync(append(drafts, now=moment))

    october = statements.statement(account=account, period="2026-10", now=datetime.now(UTC))
    assert (october["receipts"], october["first_seq"], october["last_seq"]) == (4, 3, 6)
    assert october["totals"]["provider_cost_micro"] == 203 + 204 + 205 + 306
    assert october["totals"]["bandwidth_micro"] == 4
    assert october["totals"]["wallet_taken_micro"] == 203 + 204 + 205 + 306
    sixth = Receipt.objects.get(account_id=account.pk, seq=6)
    assert october["last_hash"] == sixth.hash and october["head"]["seq"] == 6
    # The same as summing the month's bodies one by one.
    start, end = statements.month_bounds("2026-10", time_zone="UTC")
    summed = statements.month_sums(account.pk, start=start, end=end)
    assert summed.totals() == october["totals"]
    assert (summed.receipts, summed.first_seq, summed.last_seq) == (4, 3, 6)
    # A month's page is its range of seqs, in either direction.
    page = statements.chain_page(account_id=account.pk, start=start, end=end, limit=10)
    assert [r.seq for r in page] == [3, 4, 5, 6]
    newest = statements.chain_page(
        account_id=account.pk, start=start, end=end, limit=2, newest_first=True
    )
    assert [r.seq for r in newest] == [6, 5]
    empty = statements.statement(account=account, period="2026-08", now=datetime.now(UTC))
    assert (empty["receipts"], empty["head"], empty["totals"]["provider_cost_micro"]) == (
        0,
        None,
        0,
    )
    # Each body carries its chain's running totals.
    last = orjson.loads(Receipt.objects.get(account_id=account.pk, seq=8).body)
    assert last["running"]["provider_cost_micro"] == sum(sum(c) for c in months.values())
