"""Every balance change in Tollgate, each one named program of portable SQL.

step                  moves                                         used by
take_hold             group, key, caller, tags reserved += hold     request path (escrow)
mark_hold_sent        nothing: marks the hold's call sent           request path
release_holds         group, key, caller, tags reserved -= hold     settle, reaper
reserve               wallet reserved += hold                       request path
commit_reservations   wallet reserved -= hold, balance -= cost      settle, reaper
collect_excess        wallet balance -= cost above the hold, as     settle (commit, true-up)
                      far as what it has available covers it
cancel_reservation    wallet reserved -= hold                       request path, reaper
charge                group spent, settled; key, caller, tags spent settle, reaper, reconcile
charge_bandwidth      group, key, caller, tags spent by a correction reconcile
credit_wallet         wallet balance: opening, top-up, adjustment   billing.services
roll_periods          group, key spent -> 0 at a period's end,      settle, reaper, beat
                      the closing spent recorded (BudgetPeriod)     (billing.tasks)
raise_alerts          nothing: records thresholds spend reached     settle

The request path runs the fused forms of two steps (fused.py), built from the same checks
(`room`, `wallet_covers`) and rows: `take_hold_statement` (and `take_holds_statement` for a
group's batch), `reserve_statement` (`reserve_many_statement`), and
`hold_and_reserve_statement` (both at once, before a request's first call). Each is one
statement, so it commits alone; each says a refusal by what it returns, never by failing.
Table names come from the models.

Nothing else in Tollgate writes a balance, a counter, a hold, a reservation, a settled-request
marker or a ledger entry. The composites only chain these steps: `settle` (a batch of stored
usage rows, run by billing/settlement.py in the writer's transaction), `reap_hold` and
`reap_reservation` (billing/reaper.py), and billing/reconcile.py's window correction.

Batches. `release_holds`, `commit_reservations` and `charge` take lists: a single request is
a list of one, a batch of usage rows is the same step with many, so the batch form is the
single form (tests/billing/test_money_fuzz.py checks a batch and one-by-one agree). Steps
that move group, key and caller counters can share a `Moves`: each counter row is then
updated once per transaction, after the holds and markers that justify the move.

Programs. Each is a generator: it yields `(sql, params)` and receives the statement's first
row (or None), or yields `(sql, params, ALL)` and receives every row; it raises Refused to
roll back. A driver (core/sqlexec.py) runs it in one transaction: on PostgreSQL with
async psycopg on the event loop (no thread hop), elsewhere through Django's connection.
Every balance changes by a compare-and-set UPDATE (`... WHERE <room> RETURNING`), never
check-then-write, so concurrent requests can never take a balance below zero or past a
budget; each status moves only from held / pending, once.

Lock order, the same in every program (so concurrent programs wait, never deadlock):
reservation -> wallet -> ledger entry -> spend hold -> settled marker -> group -> key ->
caller spend -> tag spend (billing/tag_ledger.py). `take_hold` locks group, key, caller,
tags, then inserts a new hold.

Budget periods. A group or key with a daily or monthly budget period counts in spent_micro
the spend of its current period, which ends at period_ends_at (local midnight in the
account's time zone: accounts/periods.py). The room check reads spent as 0 once that instant
passed, so a hold right after the boundary sees the fresh budget before anything rolled
it; `roll_periods` then records the closed period with its exact spent and starts the next
at 0, under the row's lock. Counter moves that charge (`move_counters(now=...)`: settle,
the reaper) roll each row they charge first, in lock order, so a charge after the boundary
lands in the new period; a beat task rolls idle rows. `raise_alerts` records, after a
settle's charges, each alert threshold the charged rows' spent reached (once per period).

Statements use only what PostgreSQL and SQLite share: UPDATE/INSERT ... RETURNING, ON
CONFLICT DO NOTHING, CASE, UPDATE ... FROM a VALUES list; timestamps are parameters. Every
statement has a RETURNING clause (the async driver always fetches).

Modules, one concept each; import a name from the module that owns it:
  sql.py       the tables by model, the budget-room and wallet checks, batch row sources,
               `Refused`
  counters.py  `Moves` and `move_counters`: group, key, caller and tag counters, once a row
  holds.py     budget holds: take_hold, mark_hold_sent, release_holds
  fused.py     the request path's one-statement holds and reservations
  wallet.py    wallet reservations and ledger entries: reserve, commit_reservations,
               collect_excess, cancel_reservation, credit_wallet
  charges.py   charge, charge_bandwidth: settled markers and the spend they move
  periods.py   budget periods (roll_periods) and the spend alerts they reach (raise_alerts)
  settle.py    the composite `settle` of stored usage rows, and `true_up`
  reap.py      the reaper's composites: reap_reservation, reap_hold
"""
