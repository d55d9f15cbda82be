"""Usage of record: one log row per request with its attempt trail, and flushed events."""

from __future__ import annotations

from django.db import models
from django.db.models import JSONField, Value
from django.utils import timezone

from core.money import spend_micro
from core.usage_record import AttemptRecord
from usage.trail import AttemptTrailField, unpack_trail
from webfetch.models import URL_MAX_CHARS


class ServedBy(models.TextChoices):
    TEAM = "team"
    PLATFORM = "platform"


class Measurement(models.TextChoices):
    """How a usage row's amounts were known."""

    MEASURED = "measured"  # the vendor's usage, recorded by the gateway that served it
    # Its gateway died before recording it: the reaper charged the request at its hold
    # (billing/reaper.py); the row holds that charge, no tokens.
    UNMEASURED = "unmeasured"
    # Charged at its hold first, then its late row arrived and trued it up to what it measured.
    TRUEUP = "trueup"


class UsageLog(models.Model):
    """One request: who, what was asked and served, what it used. Never its prompt or answer.

    The columns are core.usage_record.UsageRecord's fields (plus stored_at): the record is
    the one definition of a usage row. Its attempts are one column, `attempt_trail`.
    """

    # Minted by the gateway: it alone keys the request's books (holds, reservations,
    # settlement, slots). The client's X-Request-Id is only a label, scoped to its account.
    # Unique with created_at (Meta): on PostgreSQL the table is partitioned by month of
    # created_at, and a partitioned table's unique keys must hold the partition key.
    request_id = models.CharField(max_length=64)
    client_request_id = models.CharField(max_length=64, blank=True)
    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    # When the row reached the database. Events and reconciliation walk windows of this
    # time, so a row journaled late (a killed gateway's, claimed later) still lands in
    # exactly one window: the one it arrived in. Rows are appended as they are stored, so
    # on PostgreSQL a BRIN index (usage 0014: a few pages for millions of rows) finds a
    # window where a B-tree cost ~23 B a row; SQLite keeps its B-tree.
    stored_at = models.DateTimeField(default=timezone.now)
    account_id = models.BigIntegerField(null=True)
    group_id = models.BigIntegerField(null=True)
    api_key_id = models.BigIntegerField(null=True)
    caller_label = models.CharField(max_length=64, blank=True)
    # "chat", "messages", "internal.complete", "web.scrape", "internal.crawl", ...: named
    # `route` in the table and the API.
    endpoint = models.CharField(max_length=32, db_column="route")
    model_requested = models.CharField(max_length=200, blank=True)
    model_served = models.CharField(max_length=200, blank=True)
    provider = models.CharField(max_length=64, blank=True)
    served_by = models.CharField(max_length=8, choices=ServedBy.choices, blank=True)
    tokens_in = models.BigIntegerField(default=0)
    tokens_out = models.BigIntegerField(default=0)
    byok_tokens_in = models.BigIntegerField(default=0)
    byok_tokens_out = models.BigIntegerField(default=0)
    # Of those tokens (platform or team): read from / written to the vendor's prompt cache,
    # and the output spent reasoning. Each kind is priced at its own rate.
    cache_read_tokens = models.BigIntegerField(default=0)
    cache_write_tokens = models.BigIntegerField(default=0)
    reasoning_tokens = models.BigIntegerField(default=0)
    # Web acquisition units (platform or team): pages fetched plainly, pages rendered with
    # JavaScript, search queries. Each is priced per profile; the cost is in provider_cost_micro.
    # A database default too: a writer of the release before, still running while this one
    # migrates, inserts rows without these columns (refused without it: dead-lettered rows).
    web_pages = models.BigIntegerField(default=0, db_default=0)
    web_rendered_pages = models.BigIntegerField(default=0, db_default=0)
    web_queries = models.BigIntegerField(default=0, db_default=0)
    # The URL a scrape or a crawl's page asked for; empty for every other route.
    web_url = models.CharField(max_length=URL_MAX_CHARS, blank=True, default="", db_default="")
    provider_cost_micro = models.BigIntegerField(default=0)
    bytes_in = models.BigIntegerField(default=0)
    bytes_out = models.BigIntegerField(default=0)
    bandwidth_charge_micro = models.BigIntegerField(default=0)
    upstream_sent = models.BooleanField(default=False)
    status = models.PositiveSmallIntegerField(default=200)
    error_code = models.CharField(max_length=16, blank=True)
    # The message the client was told with that code, exactly: our own text (LM-2002: the
    # vendor's refusal, cleaned of credentials by the adapter); cut to this length when stored.
    error_message = models.CharField(max_length=1000, blank=True, default="", db_default="")
    # The response cache: hit / miss / bypass ("" off its routes), and for a hit what the
    # vendor call it replayed cost. Database defaults for writers of the release before.
    cache_status = models.CharField(max_length=6, blank=True, default="", db_default="")
    uncached_cost_micro = models.BigIntegerField(default=0, db_default=0)
    latency_ms = models.PositiveIntegerField(default=0)
    ttft_ms = models.PositiveIntegerField(null=True, blank=True)
    streamed = models.BooleanField(default=False)
    # The wallet reservation the served attempt held; settlement committed it.
    reservation_id = models.BigIntegerField(null=True, blank=True)
    # The attempts, packed (usage/trail.py): a few dozen bytes here, not a row per attempt
    # elsewhere. Read them as `attempts`. A database default for writers that do not know it.
    attempt_trail = AttemptTrailField(default=b"", db_default=b"")
    # The request's tags (core/tags.py), a JSON list of at most MAX_TAGS short labels: jsonb
    # on PostgreSQL, where a GIN index (usage 0019) finds a tag's rows; text on SQLite, read
    # with json_each (usage/tags.py). A database default for writers of the release before.
    tags = models.JSONField(default=list, db_default=Value([], JSONField()), blank=True)
    # What each guardrail that ran did (core/usage_record.py): a JSON list, empty for the
    # requests no guardrail checked. A database default for writers of the release before.
    guardrails = models.JSONField(default=list, db_default=Value([], JSONField()), blank=True)
    # Not a usage record field: the writer's rows are measured (the database default); the
    # reaper's and the true-ups' rows say so (usage/crash_rows.py).
    measurement = models.CharField(
        max_length=10,
        choices=Measurement.choices,
        default=Measurement.MEASURED,
        db_default=Measurement.MEASURED,
    )

    class Meta:
        # Declared here, not with db_index / unique on the fields: on PostgreSQL those add a
        # varchar_pattern_ops twin to every text index, which no query here uses. The unique
        # key leads with request_id, so it serves lookups by request id as well.
        constraints = [
            models.UniqueConstraint(fields=["request_id", "created_at"], name="usage_log_once")
        ]
        # What the usage API, the dashboard and the reports filter by, each over a time range.
        # A caller label or a client request id is only ever looked up by a value: rows
        # without one (a third, and 70%) stay out of its index.
        indexes = [
            models.Index(fields=["account_id", "created_at"], name="usage_log_account_time"),
            models.Index(fields=["group_id", "created_at"], name="usage_usage_group_i_bc2155_idx"),
            models.Index(fields=["api_key_id", "created_at"], name="usage_log_key_time"),
            models.Index(
                fields=["account_id", "caller_label", "created_at"],
                name="usage_log_caller_time",
                condition=~models.Q(caller_label=""),
            ),
            models.Index(
                fields=["account_id", "client_request_id"],
                name="usage_log_client_request",
                condition=~models.Q(client_request_id=""),
            ),
        ]

    def __str__(self) -> str:
        return self.request_id

    @property
    def attempts(self) -> tuple[AttemptRecord, ...]:
        """The attempt trail, in order (unpacked on each read: lists never pay for it)."""
        return unpack_trail(self.attempt_trail)

    @property
    def spend_micro(self) -> int:
        """What the request cost its tenant: provider cost plus bandwidth charge."""
        return spend_micro(
            cost_micro=self.provider_cost_micro, bandwidth_micro=self.bandwidth_charge_micro
        )


# The sums a rollup keeps, each the total of the usage column of the same name ("requests"
# and "errors" count rows; an error is any status but 200).
ROLLUP_SUMS = (
    "tokens_in",
    "tokens_out",
    "byok_tokens_in",
    "byok_tokens_out",
    "cache_read_tokens",
    "cache_write_tokens",
    "reasoning_tokens",
    "web_pages",
    "web_rendered_pages",
    "web_queries",
    "provider_cost_micro",
    "bytes_in",
    "bytes_out",
    "bandwidth_charge_micro",
    "latency_ms",
)
# What a rollup row is per: with `hour`, the unique key (usage/rollups.py). A missing id is 0.
ROLLUP_KEY = (
    "account_id",
    "group_id",
    "api_key_id",
    "endpoint",
    "model_requested",
    "model_served",
    "served_by",
)


class RollupTotals(models.Model):
    """What a rollup is per (ROLLUP_KEY; a missing id is 0) and what it sums (ROLLUP_SUMS)."""

    account_id = models.BigIntegerField()
    group_id = models.BigIntegerField()
    api_key_id = models.BigIntegerField()
    endpoint = models.CharField(max_length=32, db_column="route")
    model_requested = models.CharField(max_length=200)
    model_served = models.CharField(max_length=200)
    served_by = models.CharField(max_length=8, choices=ServedBy.choices, blank=True)
    requests = models.BigIntegerField(default=0)
    errors = models.BigIntegerField(default=0)
    tokens_in = models.BigIntegerField(default=0)
    tokens_out = models.BigIntegerField(default=0)
    byok_tokens_in = models.BigIntegerField(default=0)
    byok_tokens_out = models.BigIntegerField(default=0)
    cache_read_tokens = models.BigIntegerField(default=0)
    cache_write_tokens = models.BigIntegerField(default=0)
    reasoning_tokens = models.BigIntegerField(default=0)
    web_pages = models.BigIntegerField(default=0)
    web_rendered_pages = models.BigIntegerField(default=0)
    web_queries = models.BigIntegerField(default=0)
    provider_cost_micro = models.BigIntegerField(default=0)
    bytes_in = models.BigIntegerField(default=0)
    bytes_out = models.BigIntegerField(default=0)
    bandwidth_charge_micro = models.BigIntegerField(default=0)
    latency_ms = models.BigIntegerField(default=0, help_text="The rows' latencies, summed.")
    # The response cache (usage/rollups.py, CACHE_COLUMNS): rows by cache status, and a hit's
    # price and what it saved (the vendor call it replayed less that price).
    cache_hits = models.BigIntegerField(default=0, db_default=0)
    cache_misses = models.BigIntegerField(default=0, db_default=0)
    cache_bypasses = models.BigIntegerField(default=0, db_default=0)
    cache_hit_cost_micro = models.BigIntegerField(default=0, db_default=0)
    cache_saved_micro = models.BigIntegerField(default=0, db_default=0)

    class Meta:
        abstract = True


class UsageRollup(RollupTotals):
    """The usage rows of one (account, group, key, endpoint, models, who paid) in one UTC hour,
    totalled: kept in the writer's transaction as rows are stored, so always equal to them.

    Hours: a day in an account's time zone, and any start or end on the hour, are whole
    buckets. Rows past retention are gone; their rollups stay.
    """

    hour = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["account_id", "hour", *ROLLUP_KEY[1:]], name="rollup_once"
            )
        ]
        indexes = [
            models.Index(fields=["group_id", "hour"], name="rollup_group_hour"),
            models.Index(fields=["api_key_id", "hour"], name="rollup_key_hour"),
            models.Index(fields=["hour"], name="rollup_hour"),
        ]

    def __str__(self) -> str:
        return f"usage of key {self.api_key_id} at {self.hour:%Y-%m-%d %H:00}"


class UsageDailyRollup(RollupTotals):
    """The same totals per UTC day (`day` is its 00:00), kept in the same transaction: whole
    days of a range are read here, 24 times fewer rows than their hours."""

    day = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["account_id", "day", *ROLLUP_KEY[1:]], name="daily_rollup_once"
            )
        ]
        indexes = [
            models.Index(fields=["group_id", "day"], name="daily_rollup_group_day"),
            models.Index(fields=["api_key_id", "day"], name="daily_rollup_key_day"),
            models.Index(fields=["day"], name="daily_rollup_day"),
        ]

    def __str__(self) -> str:
        return f"usage of key {self.api_key_id} on {self.day:%Y-%m-%d}"


class UsageEvent(models.Model):
    """Aggregated usage of one (account, group) over one flush window: emitted once."""

    class Delivery(models.TextChoices):
        PENDING = "pending"
        DELIVERED = "delivered"
        FAILED = "failed"

    window_start = models.DateTimeField()
    window_s = models.PositiveIntegerField()
    account_id = models.BigIntegerField()
    group_id = models.BigIntegerField()
    payload = models.JSONField()
    delivery = models.CharField(max_length=10, choices=Delivery.choices, default=Delivery.PENDING)
    delivery_attempts = models.PositiveSmallIntegerField(default=0)
    last_error = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    delivered_at = models.DateTimeField(null=True, blank=True)
    # A pending event is sent when this is past (null: now); a sender claims it by moving it.
    next_attempt_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["window_start", "group_id"], name="event_once")
        ]
        indexes = [models.Index(fields=["delivery", "next_attempt_at"])]

    def __str__(self) -> str:
        return f"usage of group {self.group_id} from {self.window_start:%Y-%m-%d %H:%M:%S}"


class UsageCursor(models.Model):
    """How far a periodic job has walked the usage log (by stored_at); locked while it works."""

    name = models.CharField(max_length=32, primary_key=True)
    position = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.name} at {self.position}"


class UsageDeadLetter(models.Model):
    """A journaled usage row the database refused, kept whole so nothing waits behind it.

    Written by the usage writer after the row failed alone a few times; the row's money was
    not applied (its hold and reservation are left to the reaper), so an operator reads it
    here, fixes what is wrong and stores it by hand.
    """

    request_id = models.CharField(max_length=64, blank=True)
    # The journal entry as it was (JSON text, or the bytes escaped when it was not JSON).
    # Text, not JSON: PostgreSQL's jsonb refuses the very \u0000 a poison row may carry.
    row = models.TextField()
    error = models.CharField(max_length=500)
    tries = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    last_tried_at = models.DateTimeField(default=timezone.now)

    class Meta:
        indexes = [models.Index(fields=["request_id"], name="usage_dead_letter_request")]

    def __str__(self) -> str:
        return f"dead usage row {self.request_id or '(no request id)'}"


# The totals a tag rollup keeps, each the sum of the usage column of its name ("requests"
# and "errors" count rows).
TAG_SUMS = (
    "tokens_in",
    "tokens_out",
    "byok_tokens_in",
    "byok_tokens_out",
    "provider_cost_micro",
    "bandwidth_charge_micro",
)


class UsageTagRollup(models.Model):
    """The usage rows of one account carrying one tag in one UTC hour, totalled (usage/tags.py):
    kept in the writer's transaction with the other rollups. A row with three tags is counted
    under each of them, so tags' totals do not add up to the account's."""

    account_id = models.BigIntegerField()
    tag = models.CharField(max_length=64)
    hour = models.DateTimeField()
    requests = models.BigIntegerField(default=0)
    errors = models.BigIntegerField(default=0)
    tokens_in = models.BigIntegerField(default=0)
    tokens_out = models.BigIntegerField(default=0)
    byok_tokens_in = models.BigIntegerField(default=0)
    byok_tokens_out = models.BigIntegerField(default=0)
    provider_cost_micro = models.BigIntegerField(default=0)
    bandwidth_charge_micro = models.BigIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["account_id", "hour", "tag"], name="tag_rollup_once")
        ]

    def __str__(self) -> str:
        return f"usage tagged {self.tag} at {self.hour:%Y-%m-%d %H:00}"
