#!/usr/bin/env bash
# `make test`: the whole suite, the fast layer (tests/unit) first. Uses PostgreSQL / Redis when DATABASE_URL / REDIS_URL point
# at them; otherwise the embedded defaults, and pytest names each test it skipped and why.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-python}
# Each stage says when it began (seconds since this script started): where CI time goes.
stage() { echo "--- $* (at ${SECONDS} s) ---"; }
if [ -n "${DATABASE_URL:-}" ]; then
  # Test-only secrets: a real deployment sets its own.
  export SECRET_KEY=${SECRET_KEY:-tollgate-test-secret-key-not-for-production}
  export TOLLGATE_CALLER_KEY=${TOLLGATE_CALLER_KEY:-caller-key-for-tests-not-for-production}
  # Plain http on 127.0.0.1 and a Redis that keeps nothing on disk: said explicitly.
  export TOLLGATE_SECURE_COOKIES=${TOLLGATE_SECURE_COOKIES:-false}
  export TOLLGATE_REDIS_PERSISTENCE=${TOLLGATE_REDIS_PERSISTENCE:-none}
  export TOLLGATE_RECEIPT_KEYS=${TOLLGATE_RECEIPT_KEYS:-r1:Vb3sQk1n0pL5sXw9eT6yU4iO2aS1dF3gH5jkq7Zr8Kc}
  export SEALING_KEYS=${SEALING_KEYS:-v2:2Pc1W2pQn0l6t1mS1cYl0oWcJ5rU3b3m9h8xq0a4y7I,v1:q7Zr8Kc2b1Vv3nM0pL5sXw9eT6yU4iO2aS1dF3gH5jk}
fi
[ -n "${DATABASE_URL:-}" ] || echo "DATABASE_URL unset: running on embedded SQLite (PostgreSQL-only tests are skipped)."
[ -n "${REDIS_URL:-}" ] || echo "REDIS_URL unset: Redis-only tests are skipped."
# Bytecode for every module, once: the suite starts hundreds of Python processes (gateways,
# workers, make run), and where PYTHONDONTWRITEBYTECODE is set (CI's machine sets it) each
# would compile the project's sources again (about 0.45 s of CPU a process).
$PY -m compileall -q -j 0 -x '(^|/)(\.venv|var|node_modules|\.git)/' . >/dev/null
# Dependencies run one way (pyproject.toml [tool.importlinter]): a new cycle fails here.
"$(dirname "$(command -v "$PY")")/lint-imports" --no-cache | tail -n 6
# Types (pyproject.toml [tool.mypy], with django-stubs): the whole tree, but the files in its
# `exclude`. Cold (no .mypy_cache) about 45 s of CPU; warm a few seconds.
if [ "$#" -gt 0 ]; then
  $PY -m mypy
  # With arguments: one pytest run of exactly those (`scripts/test.sh tests/gateway -k rpm`).
  exec $PY -m pytest -rs -q "$@"
fi
# The whole suite: mypy checks beside the fast layer (it is CPU; the fast layer is CPU too, but
# the machine has two cores), and a type error fails the run once both are done.
types_log=$(mktemp)
$PY -m mypy >"$types_log" 2>&1 &
types_run=$!
# First the fast layer (in-process, no servers; under 30 s), stopping at its first failure,
# then everything else.
stage "tests/unit: the fast layer"
# Each run lists its slowest tests (--durations): where CI time goes stays in every log.
$PY -m pytest -rs -q -x --durations=10 tests/unit
stage "mypy"
types_status=0
wait "$types_run" || types_status=$?
cat "$types_log"
rm -f "$types_log"
[ "$types_status" -eq 0 ] || exit "$types_status"
stage "the rest of the suite"
if [ -z "${DATABASE_URL:-}" ] || [ -z "${REDIS_URL:-}" ]; then
  exec $PY -m pytest -rs -q --ignore=tests/unit
fi
# With PostgreSQL and Redis: three pytest processes side by side, each on its own test database
# and Redis database. Most of these tests wait on the real processes they start, not on the
# CPU: measured on CI's two cores, two processes took 14:26 and kept the CPU 80-85 % busy;
# three took 11:25 at 89 %.
shards=$($PY - <<'PY'
import os
from urllib.parse import urlsplit, urlunsplit

db = urlsplit(os.environ["DATABASE_URL"])
redis = urlsplit(os.environ["REDIS_URL"])
number = int(redis.path.strip("/") or 0)
step = -1 if number >= 3 else 1
for shard, suffix in ((1, "_b"), (2, "_c"), (3, "_d")):
    print(urlunsplit(db._replace(path=db.path.rstrip("/") + suffix)))
    print(urlunsplit(redis._replace(path=f"/{number + step * shard}")))
PY
)
# Directories by the time their tests took; the last process runs every directory the first
# two do not (nothing is left out). The second is the shortest by about three minutes on
# purpose: the container stack's test starts when it is done (below), and ends about when the
# other two do.
first=(tests/gateway tests/bench tests/scripts tests/config tests/providers tests/guardrails
  tests/alerts)
second=(tests/dashboard tests/accounts tests/usage tests/byok)
# The container stack's test starts as soon as one of the three processes is done, in a fourth
# (its own database and Redis database names): beside all three for the whole run (tried) its
# containers' CPU slowed them by more than it saved, but the processes end a minute or two
# apart, and it takes four minutes. The rotation under load runs alone, last: its test process
# sends 500 requests a second to two gateways and fails if it falls behind, which it did
# beside the three processes (390 a second in one CI run).
containers=tests/deploy/test_compose.py
rotation=tests/gateway/test_rotation_fleet.py
alone=("$rotation" "$containers")
logs=$(mktemp -d)
$PY -m pytest -rs -q --durations=25 "${first[@]}" "${alone[@]/#/--ignore=}" >"$logs/first.log" 2>&1 &
first_run=$!
DATABASE_URL=$(echo "$shards" | sed -n 1p) REDIS_URL=$(echo "$shards" | sed -n 2p) \
  $PY -m pytest -rs -q --durations=25 "${second[@]}" >"$logs/second.log" 2>&1 &
second_run=$!
taken=("${first[@]}" "${second[@]}")
DATABASE_URL=$(echo "$shards" | sed -n 3p) REDIS_URL=$(echo "$shards" | sed -n 4p) \
  $PY -m pytest -rs -q --durations=25 --ignore=tests/unit "${taken[@]/#/--ignore=}" "${alone[@]/#/--ignore=}" \
  >"$logs/third.log" 2>&1 &
third_run=$!
while [ "$(jobs -rp | wc -l)" -ge 3 ]; do sleep 1; done
stage "$containers: once one process is done"
DATABASE_URL=$(echo "$shards" | sed -n 5p) REDIS_URL=$(echo "$shards" | sed -n 6p) \
  $PY -m pytest -rs -q --durations=5 "$containers" >"$logs/containers.log" 2>&1 &
containers_run=$!
status=0
wait "$first_run" || status=1
wait "$second_run" || status=1
wait "$third_run" || status=1
stage "the three processes done"
wait "$containers_run" || status=1
echo "--- ${first[*]} ---"
cat "$logs/first.log"
echo "--- ${second[*]} (its own test database and Redis database) ---"
cat "$logs/second.log"
echo "--- everything else (its own test database and Redis database) ---"
cat "$logs/third.log"
echo "--- $containers (its own database and Redis database names) ---"
cat "$logs/containers.log"
rm -rf "$logs"
stage "$rotation: alone"
$PY -m pytest -rs -q --durations=5 "$rotation" || status=1
stage "done"
exit "$status"
