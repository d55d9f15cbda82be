"""The fast layer: Tollgate's components in this process, no server started, under 30 s.

`make test` (scripts/test.sh) runs it first, stopping at its first failure, then the rest of
the suite. Files mirror the code they test:

- gateway/: test_limits.py (the limiter, per-process and through Redis), test_auth_failures.py
  (failed key lookups per address), test_breakers.py, test_plan.py, test_shapes.py,
  test_orchestrator.py (retries, key benching, fallback, chain lock, breakers, escrow, the
  first-token rule, on the in-process fake vendor scripted per call).
- core/: test_money.py (integer micro-USD arithmetic).
- billing/: test_ledger.py (every money step through run_sync, on the test database).

Time is a clock the test moves (tests.support.clock.FakeClock); Redis, where REDIS_URL is
set, is the real one, through core.shared_state.SharedState (tests.support.shared_state).
"""
