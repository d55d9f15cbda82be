"""Money of record: wallets, escrow reservations, spend holds, ledgers. Integer micro-USD."""

from __future__ import annotations

from datetime import UTC, datetime

import orjson
from django.db import models
from django.utils import timezone

from accounts.models import Period
from billing.receipt_codec import HexDigestField, PackedJsonField


class Wallet(models.Model):
    """A prepaid balance. available = balance - reserved, never below zero."""

    account = models.OneToOneField(
        "accounts.Account", on_delete=models.CASCADE, related_name="wallet"
    )
    balance_micro = models.BigIntegerField(default=0)
    reserved_micro = models.BigIntegerField(default=0)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=models.Q(reserved_micro__gte=0)
                & models.Q(balance_micro__gte=models.F("reserved_micro")),
                name="wallet_never_negative",
            )
        ]

    def __str__(self) -> str:
        return f"wallet of {self.account}"


class Reservation(models.Model):
    """An escrow hold for one platform attempt; resolves exactly once."""

    class Status(models.TextChoices):
        PENDING = "pending"
        COMMITTED = "committed"
        CANCELLED = "cancelled"
        EXPIRED = "expired"

    wallet = models.ForeignKey(Wallet, on_delete=models.PROTECT, related_name="reservations")
    request_id = models.CharField(max_length=64)
    group_id = models.BigIntegerField(null=True)
    api_key_id = models.BigIntegerField(null=True)
    attempt_no = models.PositiveSmallIntegerField(default=1)
    # Taken right before its vendor call: a reservation that expires with its call sent was
    # served (a gateway died mid-request) and is committed, never released at 0.
    call_sent = models.BooleanField(default=False)
    unmeasured = models.BooleanField(
        default=False, help_text="Committed at the hold by the reaper: usage never measured."
    )
    amount_micro = models.BigIntegerField()
    committed_micro = models.BigIntegerField(default=0)
    excess_micro = models.BigIntegerField(
        default=0,
        help_text="Measured cost above the hold: collected after the commit as far as the"
        " wallet covers it (collected_micro), the rest stated as uncollected_micro.",
    )
    # The excess's follow-up charge, resolved with the commit (once): what the wallet had
    # available paid for, and what it could not (the receipt and counters state only the
    # first).
    collected_micro = models.BigIntegerField(default=0, db_default=0)
    uncollected_micro = models.BigIntegerField(default=0, db_default=0)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING)
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField()
    resolved_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        # Indexes declared here, not with db_index on the field: that adds a
        # varchar_pattern_ops twin on PostgreSQL, which no query uses.
        indexes = [
            models.Index(fields=["request_id"], name="reservation_request"),
            # The reaper's walk: only open rows, a small index however long the history.
            models.Index(
                fields=["expires_at"],
                condition=models.Q(status="pending"),
                name="reservation_open_expiry",
            ),
        ]

    def __str__(self) -> str:
        return f"reservation {self.pk} ({self.status})"


class LedgerEntry(models.Model):
    """Append-only wallet ledger: a correction is a new row."""

    class Kind(models.TextChoices):
        OPENING = "opening"
        TOPUP = "topup"
        COMMIT = "commit"
        ADJUSTMENT = "adjustment"
        TRUEUP = "trueup"  # a commit at the hold corrected to the measured cost
        EXCESS = "excess"  # a measured cost above its hold, collected after the commit

    wallet = models.ForeignKey(Wallet, on_delete=models.PROTECT, related_name="ledger")
    kind = models.CharField(max_length=12, choices=Kind.choices)
    amount_micro = models.BigIntegerField(help_text="Signed: credits positive, debits negative.")
    balance_after_micro = models.BigIntegerField()
    # No database constraint: a month of reservations is dropped by retention (its
    # partition, billing/partitions.py) while its entries stay, the balances' history.
    reservation = models.OneToOneField(
        Reservation,
        null=True,
        blank=True,
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        related_name="ledger_entry",
    )
    reason = models.CharField(max_length=200, blank=True)
    # The request whose money it moved (commit, excess, trueup): its receipt names the entry.
    # Blank for credits. The database default covers raw inserts.
    request_id = models.CharField(max_length=64, blank=True, default="", db_default="")
    # Who wrote it by hand (an operator's username); blank for Tollgate's own entries. The
    # database default covers the ledger's raw inserts.
    actor = models.CharField(max_length=150, blank=True, default="", db_default="")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-id"]
        verbose_name_plural = "ledger entries"

    def __str__(self) -> str:
        return f"{self.kind} {self.amount_micro}"


class SpendHold(models.Model):
    """The budget hold a request takes on its group (and key) at start; released at settle."""

    class Status(models.TextChoices):
        HELD = "held"
        SETTLED = "settled"
        EXPIRED = "expired"  # released at 0: its vendor call was never sent
        CHARGED = "charged"  # charged unmeasured by the reaper: its call was sent

    request_id = models.CharField(max_length=64)
    group = models.ForeignKey("accounts.Group", on_delete=models.CASCADE)
    # The key the hold reserved on (a key with a budget), else NULL: its release gives that
    # key's reserved back.
    api_key = models.ForeignKey("accounts.ApiKey", null=True, on_delete=models.CASCADE)
    # The request's key, budgeted or not: a hold the reaper charges charges it, as the
    # request's usage row would have. NULL on a hold a release before billing 0015 wrote:
    # its request's key is then api_key (named only when it had a budget).
    request_key = models.ForeignKey(
        "accounts.ApiKey", null=True, on_delete=models.CASCADE, related_name="+"
    )
    caller_spend = models.ForeignKey("CallerSpend", null=True, on_delete=models.CASCADE)
    amount_micro = models.BigIntegerField()
    status = models.CharField(max_length=8, choices=Status.choices, default=Status.HELD)
    # Set before a platform vendor call is sent (team-served calls cost no tokens): a hold
    # that expires with it set was served by a gateway that died, and is charged.
    call_sent = models.BooleanField(default=False)
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["request_id"], name="spend_hold_once")]
        # The reaper's walk: only held rows.
        indexes = [
            models.Index(
                fields=["expires_at"],
                condition=models.Q(status="held"),
                name="spend_hold_open_expiry",
            )
        ]


class CallerSpend(models.Model):
    """One end caller's spend in a group over one label window (its budget period)."""

    group = models.ForeignKey("accounts.Group", on_delete=models.CASCADE)
    caller_label = models.CharField(max_length=64)
    period = models.CharField(max_length=8, help_text="The label window: 2026-11 or 2026.")
    spent_micro = models.BigIntegerField(default=0)
    reserved_micro = models.BigIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["group", "caller_label", "period"], name="caller_spend_once"
            )
        ]

    def __str__(self) -> str:
        return f"{self.caller_label} in {self.group_id} ({self.period})"


class TagBudget(models.Model):
    """A budget on one request tag of an account (core/tags.py): every request carrying the
    tag holds on it before any vendor is called and is refused LM-4001 naming the tag when
    spent + reserved reaches the budget, like a group budget. Spend is counted per period in
    TagSpend rows (a new period is a new row: nothing to roll)."""

    account = models.ForeignKey("accounts.Account", on_delete=models.CASCADE)
    tag = models.CharField(max_length=64)
    budget_max_micro = models.BigIntegerField()
    budget_period = models.CharField(max_length=8, choices=Period.choices, default=Period.MONTHLY)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["account", "tag"], name="tag_budget_once")]

    def __str__(self) -> str:
        return f"tag {self.tag} of account {self.account_id}"


class TagSpend(models.Model):
    """What one tag of an account spent and holds in one budget period.

    `period` is the period's key in the account's time zone: "2026-12-06" (daily),
    "2026-12" (monthly) or "all" (a budget that never resets).
    """

    account = models.ForeignKey("accounts.Account", on_delete=models.CASCADE)
    tag = models.CharField(max_length=64)
    period = models.CharField(max_length=10)
    spent_micro = models.BigIntegerField(default=0)
    reserved_micro = models.BigIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["account", "tag", "period"], name="tag_spend_once")
        ]

    def __str__(self) -> str:
        return f"tag {self.tag} of account {self.account_id} ({self.period})"


class SpendHoldTag(models.Model):
    """A request's hold on one budgeted tag: released, and charged to the tag, with the
    request's hold (SpendHold) by its request id."""

    request_id = models.CharField(max_length=64)
    tag_spend = models.ForeignKey(TagSpend, on_delete=models.CASCADE)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["request_id", "tag_spend"], name="spend_hold_tag_once")
        ]


class SpendAdjustment(models.Model):
    """A correction of a group's spent counter found by reconciliation (append-only)."""

    group = models.ForeignKey("accounts.Group", on_delete=models.CASCADE)
    window_start = models.DateTimeField()
    amount_micro = models.BigIntegerField()
    reason = models.CharField(max_length=200)
    created_at = models.DateTimeField(default=timezone.now)


class SettledRequest(models.Model):
    """Marks a request whose cost and bandwidth are charged to group and key counters.

    Inserted (ON CONFLICT DO NOTHING) by billing.ledger.charges.charge for whoever charges the
    request first: its settle, the reaper, or reconciliation for a request whose settle never
    committed because its gateway died. The inserter charges what the usage row says; anyone
    later charges nothing, so no request is ever charged twice.
    """

    class Source(models.TextChoices):
        SETTLE = "settle"
        REAPER = "reaper"
        RECONCILE = "reconcile"
        # A reaper charge at the hold, trued up to the measured cost when the row arrived.
        TRUEUP = "trueup"

    request_id = models.CharField(max_length=64)
    group_id = models.BigIntegerField()
    api_key_id = models.BigIntegerField(null=True)
    bandwidth_micro = models.BigIntegerField()
    provider_cost_micro = models.BigIntegerField(default=0)
    source = models.CharField(max_length=10, choices=Source.choices)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["request_id"], name="settled_request_once")]

    def __str__(self) -> str:
        return f"{self.request_id}: {self.bandwidth_micro} ({self.source})"


class BudgetPeriod(models.Model):
    """A closed budget period of a group (api_key null) or a key: what it spent (append-only).

    Written by billing.ledger.periods.roll_periods when the period ends; the group's or key's own
    spent_micro then starts again at 0.
    """

    group = models.ForeignKey("accounts.Group", on_delete=models.CASCADE, related_name="+")
    api_key = models.ForeignKey(
        "accounts.ApiKey", null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    budget_period = models.CharField(max_length=8)
    starts_at = models.DateTimeField()
    ends_at = models.DateTimeField()
    budget_max_micro = models.BigIntegerField(null=True, blank=True)
    spent_micro = models.BigIntegerField()
    closed_at = models.DateTimeField(default=timezone.now)

    class Meta:
        indexes = [
            models.Index(fields=["group", "api_key", "-starts_at"], name="budget_period_history")
        ]

    def __str__(self) -> str:
        owner = f"key {self.api_key_id}" if self.api_key_id else f"group {self.group_id}"
        return f"{owner}: {self.spent_micro} from {self.starts_at:%Y-%m-%d %H:%M}"


# BudgetAlert's uniqueness needs non-null columns (NULLs never conflict): a group's own
# budget is scope 0, and a budget without a period has this as its period.
NO_PERIOD = datetime(1970, 1, 1, tzinfo=UTC)


class BudgetAlert(models.Model):
    """Spend reached a threshold of a group's or key's budget: raised once per period and
    threshold (in settlement's transaction), delivered once through the usage sink."""

    class Delivery(models.TextChoices):
        PENDING = "pending"
        DELIVERED = "delivered"
        FAILED = "failed"

    group = models.ForeignKey("accounts.Group", on_delete=models.CASCADE, related_name="+")
    api_key = models.ForeignKey(
        "accounts.ApiKey", null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    key_scope = models.BigIntegerField(help_text="The key's id; 0 for the group's own budget.")
    period_starts_at = models.DateTimeField(null=True, blank=True)
    period_ends_at = models.DateTimeField(null=True, blank=True)
    period_scope = models.DateTimeField(help_text="period_starts_at; 1970-01-01 for no period.")
    threshold_pct = models.PositiveSmallIntegerField()
    spent_micro = models.BigIntegerField()
    budget_max_micro = models.BigIntegerField()
    created_at = models.DateTimeField(default=timezone.now)
    delivery = models.CharField(max_length=10, choices=Delivery.choices, default=Delivery.PENDING)
    delivery_attempts = models.PositiveSmallIntegerField(default=0)
    last_error = models.CharField(max_length=200, blank=True)
    delivered_at = models.DateTimeField(null=True, blank=True)
    # A pending alert is sent when this is past (null: now); a sender claims it by moving it.
    next_attempt_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["group", "key_scope", "period_scope", "threshold_pct"],
                name="budget_alert_once",
            )
        ]
        indexes = [models.Index(fields=["delivery", "next_attempt_at"])]

    @property
    def public_id(self) -> str:
        return f"balert_{self.pk}"

    def __str__(self) -> str:
        owner = f"key {self.api_key_id}" if self.api_key_id else f"group {self.group_id}"
        return f"{owner} at {self.threshold_pct}%"


class Receipt(models.Model):
    """The signed proof of one charge (billing/receipts.py): append-only, chained per account.

    `body` is the canonical JSON the hash covers; the other columns repeat what it says so
    receipts can be found and summed. `cost_micro` is what this receipt moved the group's
    settled cost by (negative for a true-up refund), `bandwidth_micro` what it moved spent by
    on top. The last receipt of each account in a settled batch carries the signature; it
    covers every receipt before it through the chain.
    """

    class Kind(models.TextChoices):
        CHARGE = "charge"  # a usage row stored: its measured cost
        CACHE_HIT = "cache_hit"  # a usage row of a response-cache hit: its cache price
        UNMEASURED = "unmeasured"  # the reaper: a served request whose row never arrived
        TRUEUP = "trueup"  # that row arrived late: the difference to its measured cost
        CORRECTION = "correction"  # reconciliation: a row stored unsettled, or its bandwidth

    account_id = models.BigIntegerField()
    seq = models.BigIntegerField()
    request_id = models.CharField(max_length=64)
    kind = models.CharField(max_length=12, choices=Kind.choices)
    group_id = models.BigIntegerField(null=True)
    api_key_id = models.BigIntegerField(null=True)
    cost_micro = models.BigIntegerField()
    bandwidth_micro = models.BigIntegerField()
    settled_at = models.DateTimeField()
    body = PackedJsonField()  # the JSON text; stored deflated (billing/receipt_codec.py)
    hash = HexDigestField()  # hex in Python, 32 bytes stored
    signature = models.CharField(max_length=128, blank=True, default="")
    key_id = models.CharField(max_length=32, blank=True, default="")

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["account_id", "seq"], name="receipt_seq_once")
        ]
        indexes = [
            # A hash index on PostgreSQL (migration 0012): equality only, ~20 bytes an entry.
            models.Index(fields=["request_id"], name="receipt_request"),
            # Charges without a usage row, window by window across accounts (usage events).
            models.Index(
                fields=["settled_at"],
                condition=models.Q(kind__in=["unmeasured", "trueup"]),
                name="receipt_uncharged_time",
            ),
        ]

    def __str__(self) -> str:
        return f"receipt {self.account_id}/{self.seq} ({self.kind} {self.request_id})"

    @property
    def prev_hash(self) -> str:
        """The hash of the account's receipt before it, as its body states (not stored twice)."""
        return str(orjson.loads(self.body).get("prev", ""))


class ReceiptArchive(models.Model):
    """The manifest of one account's month of receipts moved to the archive store
    (billing/archives.py): append-only, signed, and what lets its receipts leave PostgreSQL.

    `prev` is the hash before `first_seq` and `last_hash` the month's last receipt's, so the
    chain continues across archives and into the store. The row is inserted only once the
    file is written and its `sha256` and `size_bytes` known: the database's function that
    removes archived receipts (migration 0013) trusts nothing else.
    """

    account_id = models.BigIntegerField()
    period = models.CharField(max_length=7)  # YYYY-MM in the account's time zone
    time_zone = models.CharField(max_length=64)
    starts_at = models.DateTimeField()
    ends_at = models.DateTimeField()
    first_seq = models.BigIntegerField()
    last_seq = models.BigIntegerField()
    prev = models.CharField(max_length=64)
    last_hash = models.CharField(max_length=64)
    receipts = models.BigIntegerField()
    totals = models.JSONField()  # the month's, as a statement states them
    running = models.JSONField()  # the chain's running totals at last_seq (its body's)
    head = models.JSONField()  # the month's last receipt: seq, hash, signature, key_id, settled_at
    # The largest ledger entry id its receipts name (None: none): the reconciliation trusts
    # the archived months' entries through the totals (billing/receipt_ledger.py).
    ledger_last_entry = models.BigIntegerField(null=True)
    sha256 = models.CharField(max_length=64)
    size_bytes = models.BigIntegerField()
    created_at = models.DateTimeField()
    key_id = models.CharField(max_length=32)
    signature = models.CharField(max_length=128)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["account_id", "period"], name="receipt_archive_once"),
            models.UniqueConstraint(
                fields=["account_id", "first_seq"], name="receipt_archive_seq_once"
            ),
        ]

    def __str__(self) -> str:
        return f"receipt archive {self.account_id}/{self.period} ({self.first_seq}-{self.last_seq})"
