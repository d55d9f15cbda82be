"""The test harness: real PostgreSQL / Redis when configured, real processes, a real stub.

- The database is pytest-django's test database (PostgreSQL when DATABASE_URL points at
  one, else an SQLite file). Tests that drive processes use `transactional_db`, so what
  they create is committed and visible to the gateway processes they start.
- Redis is used when REDIS_URL is set; tests that need it are skipped otherwise, and the
  skip reason names what is missing. With TEST_REQUIRE_SERVICES=1 (CI) a missing service
  fails the run instead.
- The only fake is the upstream vendor: the stub, started as its own process.

Modules: `services` (which services are configured, shared Redis state), `processes` (the
stub, gateways, a private redis-server), `tenants`, `profiles`, `stacks` (a gateway with
profiles installed), `rates` (a fresh rate window for a fleet), `usage` (usage rows,
journal rows), `metrics`, `sse`, `waits`.
tests/conftest.py holds the pytest hooks and fixtures built on them.
"""
