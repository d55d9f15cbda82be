#!/usr/bin/env bash
# `make test`: the whole suite, the fast layer (tests/unit) first. Uses PostgreSQL / Redis when DATABASE_URL / REDIS_URL point
# at them; otherwise the embedded defaults, and pytest names each test it skipped and why.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-python}
if [ -n "${DATABASE_URL:-}" ]; then
  # Test-only secrets: a real deployment sets its own.
  export SECRET_KEY=${SECRET_KEY:-tollgate-test-secret-key-not-for-production}
  export TOLLGATE_CALLER_KEY=${TOLLGATE_CALLER_KEY:-caller-key-for-tests-not-for-production}
  export SEALING_KEYS=${SEALING_KEYS:-v2:2Pc1W2pQn0l6t1mS1cYl0oWcJ5rU3b3m9h8xq0a4y7I,v1:q7Zr8Kc2b1Vv3nM0pL5sXw9eT6yU4iO2aS1dF3gH5jk}
fi
[ -n "${DATABASE_URL:-}" ] || echo "DATABASE_URL unset: running on embedded SQLite (PostgreSQL-only tests are skipped)."
[ -n "${REDIS_URL:-}" ] || echo "REDIS_URL unset: Redis-only tests are skipped."
# Dependencies run one way (pyproject.toml [tool.importlinter]): a new cycle fails here.
"$(dirname "$(command -v "$PY")")/lint-imports" --no-cache | tail -n 6
# With arguments: one pytest run of exactly those (`scripts/test.sh tests/gateway -k rpm`).
[ "$#" -eq 0 ] || exec $PY -m pytest -rs -q "$@"
# First the fast layer (in-process, no servers; under 30 s), stopping at its first failure,
# then everything else.
echo "--- tests/unit: the fast layer ---"
$PY -m pytest -rs -q -x tests/unit
echo "--- the rest of the suite ---"
exec $PY -m pytest -rs -q --ignore=tests/unit
