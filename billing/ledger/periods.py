"""Budget periods: finding and rolling the groups and keys whose period ended (each closed
period a BudgetPeriod row), and raising the spend alerts a period's spent reached."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from django.db import connection

from accounts.periods import period_bounds
from billing.ledger.sql import ACCOUNTS, ALERTS, GROUPS, KEYS, PERIODS, batch_rows
from core.sqlexec import ALL, Program

_PERIOD_TABLES = {"group": GROUPS, "key": KEYS}
_ENDED = {
    "group": (
        f"SELECT 'group', g.id, g.budget_period, a.time_zone FROM {GROUPS} g"
        f" JOIN {ACCOUNTS} a ON a.id = g.account_id WHERE g.period_ends_at <= %s"
    ),
    "key": (
        f"SELECT 'key', k.id, k.budget_period, a.time_zone FROM {KEYS} k"
        f" JOIN {GROUPS} g ON g.id = k.group_id"
        f" JOIN {ACCOUNTS} a ON a.id = g.account_id WHERE k.period_ends_at <= %s"
    ),
}


def ended_periods(
    *,
    now: datetime,
    group_ids: Iterable[int] | None = None,
    key_ids: Iterable[int] | None = None,
    limit: int | None = None,
) -> Program[dict[tuple[str, int], tuple[str, str]]]:
    """Find the groups and keys (all, or these) whose budget period ended by `now`.

    A plain read, no lock: `roll_period` checks again under the row's lock. Returns
    {("group" | "key", id): (budget_period, the account's time zone)}.
    """
    parts, params = [], []
    for table, ids in (("group", group_ids), ("key", key_ids)):
        sql, part_params = _ENDED[table], [now]
        if ids is not None:
            ids = sorted(set(ids))
            if not ids:
                continue
            source, id_params = batch_rows(("bigint",), [(i,) for i in ids])
            sql += f" AND {table[0]}.id IN ({source})"
            part_params += id_params
        parts.append(sql)
        params += part_params
    if not parts:
        return {}
    sql = " UNION ALL ".join(parts)
    if limit is not None:
        sql = f"SELECT * FROM ({sql}) AS ended LIMIT {int(limit)}"
    rows = yield (sql, tuple(params), ALL)
    return {(table, row_id): (period, tz) for table, row_id, period, tz in rows}


def roll_period(
    table: str, row_id: int, period: str, tz_name: str, *, now: datetime
) -> Program[bool]:
    """Close a group's or key's ended period: record its spent, start the current one at 0."""
    name = _PERIOD_TABLES[table]
    locked = yield (
        f"UPDATE {name} SET spent_micro = spent_micro WHERE id = %s AND period_ends_at <= %s"
        " RETURNING id",
        (row_id, now),
    )
    if locked is None:
        return False  # rolled meanwhile, or its period was changed
    group, key = ("id", "CAST(NULL AS bigint)") if table == "group" else ("group_id", "id")
    yield (
        f"INSERT INTO {PERIODS} (group_id, api_key_id, budget_period, starts_at,"
        " ends_at, budget_max_micro, spent_micro, closed_at)"
        f" SELECT {group}, {key}, budget_period, period_starts_at, period_ends_at,"
        f" budget_max_micro, spent_micro, %s FROM {name} WHERE id = %s RETURNING id",
        (now, row_id),
    )
    starts, ends = period_bounds(period, tz_name, now)
    yield (
        f"UPDATE {name} SET spent_micro = 0, period_starts_at = %s, period_ends_at = %s"
        " WHERE id = %s RETURNING id",
        (starts, ends, row_id),
    )
    return True


def roll_periods(
    *,
    now: datetime,
    group_ids: Iterable[int] | None = None,
    key_ids: Iterable[int] | None = None,
    limit: int | None = 500,
) -> Program[int]:
    """Roll every group and key (all, or these) whose budget period ended; return how many.

    Each closed period becomes a BudgetPeriod row with its exact spent and budget; spent
    starts again at 0 in the period containing `now`. Groups first, then keys, by id: the
    ledger's lock order. (Periods a row sat idle through leave no row: nothing was spent.)
    """
    ended = yield from ended_periods(now=now, group_ids=group_ids, key_ids=key_ids, limit=limit)
    rolled = 0
    for (table, row_id), (period, tz_name) in sorted(
        ended.items(), key=lambda item: (item[0][0] != "group", item[0][1])
    ):
        rolled += yield from roll_period(table, row_id, period, tz_name, now=now)
    return rolled


# ---------------------------------------------------------------- spend alerts


def _alert_thresholds() -> tuple[str, str]:
    """The account's alert percents as rows (`t`), and the percent's expression: JSON array
    expansion is the one thing PostgreSQL and SQLite spell differently."""
    if connection.vendor == "postgresql":
        return (
            "CROSS JOIN LATERAL jsonb_array_elements_text(a.budget_alert_pcts) AS t(pct)",
            "CAST(t.pct AS integer)",
        )
    return "CROSS JOIN json_each(a.budget_alert_pcts) AS t", "CAST(t.value AS integer)"


def raise_alerts(
    *, group_ids: Iterable[int], key_ids: Iterable[int], now: datetime
) -> Program[list[int]]:
    """Record each alert threshold the spent of these groups and keys reached; return the
    ids of the alerts raised now.

    One statement: threshold t of the account's budget_alert_pcts is reached when
    spent * 100 >= t * budget_max (and something was spent). An alert exists once per
    (group or key, period, threshold): a later batch past the same threshold adds nothing,
    the next period raises it again.
    """
    from billing.models import NO_PERIOD

    join, pct = _alert_thresholds()
    parts, params = [], []
    for table, ids in (("group", group_ids), ("key", key_ids)):
        ids = sorted(set(ids))
        if not ids:
            continue
        source, id_params = batch_rows(("bigint",), [(i,) for i in ids])
        if table == "group":
            owner = "g.id, CAST(NULL AS bigint), 0"
            row, tables = "g", f"{GROUPS} g JOIN {ACCOUNTS} a ON a.id = g.account_id"
        else:
            owner = "k.group_id, k.id, k.id"
            row = "k"
            tables = (
                f"{KEYS} k JOIN {GROUPS} g ON g.id = k.group_id"
                f" JOIN {ACCOUNTS} a ON a.id = g.account_id"
            )
        parts.append(
            f"SELECT {owner}, {row}.period_starts_at, {row}.period_ends_at,"
            f" COALESCE({row}.period_starts_at, %s), {pct}, {row}.spent_micro,"
            f" {row}.budget_max_micro FROM {tables} {join}"
            f" WHERE {row}.id IN ({source}) AND {row}.budget_max_micro IS NOT NULL"
            f" AND {row}.spent_micro > 0"
            f" AND {row}.spent_micro * 100 >= {pct} * {row}.budget_max_micro"
            f" AND ({row}.period_ends_at IS NULL OR {row}.period_ends_at > %s)"
        )
        params += [NO_PERIOD, *id_params, now]
    if not parts:
        return []
    rows = yield (
        f"INSERT INTO {ALERTS} (group_id, api_key_id, key_scope, period_starts_at,"
        " period_ends_at, period_scope, threshold_pct, spent_micro, budget_max_micro,"
        " created_at, delivery, delivery_attempts, last_error)"
        f" SELECT *, %s, 'pending', 0, '' FROM ({' UNION ALL '.join(parts)}) AS reached"
        " WHERE true ON CONFLICT (group_id, key_scope, period_scope, threshold_pct) DO NOTHING"
        " RETURNING id",
        (now, *params),
        ALL,
    )
    return [r[0] for r in rows]
