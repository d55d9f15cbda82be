#!/usr/bin/env bash
# `make run`: start the embedded Tollgate (SQLite, no Redis, the stub upstream) in the
# background, show one streamed completion, and print the lines that point SDKs at it.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-python}
PORT=${PORT:-8000}
STUB_PORT=${STUB_PORT:-8765}
VAR=${TOLLGATE_VAR_DIR:-var}
mkdir -p "$VAR" var
VAR=$(cd "$VAR" && pwd -P)
# Where `make stop` finds this run from any shell, whatever its TOLLGATE_VAR_DIR: this
# checkout's var/, not the run's (scripts/stop.sh).
RECORD=var/make-run

scripts/stop.sh >/dev/null 2>&1 || true

# Each run's logs are kept: the previous five runs' as NAME.log.1 (newest) to NAME.log.5.
for name in migrate stub gateway worker; do
  for n in 4 3 2 1; do
    [ ! -f "$VAR/$name.log.$n" ] || mv -f "$VAR/$name.log.$n" "$VAR/$name.log.$((n + 1))"
  done
  [ ! -f "$VAR/$name.log" ] || mv -f "$VAR/$name.log" "$VAR/$name.log.1"
done

# The demo is one process serving both planes on one port (config.asgi:application); a
# deployment runs them apart (docs/production.md). Links it prints point here.
export TOLLGATE_PUBLIC_URL="http://127.0.0.1:$PORT"
$PY manage.py migrate --noinput >"$VAR/migrate.log"
demo_json=$($PY manage.py seed_demo --stub-url "http://127.0.0.1:$STUB_PORT")
read -r api_key api_token operator_user operator_password owner_user owner_password < <($PY -c '
import json, sys
demo = json.loads(sys.argv[1])
names = "api_key api_token operator_username operator_password owner_username owner_password"
print(*(demo[name] for name in names.split()))' "$demo_json")

nohup $PY manage.py runstub --host 127.0.0.1 --port "$STUB_PORT" >"$VAR/stub.log" 2>&1 &
echo $! >"$VAR/stub.pid"
# The demo's web pages are on the stub at 127.0.0.1, which only this embedded demo lets the
# fetcher reach (production never sets this). A Celery worker runs the crawl jobs.
export TOLLGATE_WEB_ALLOW_NETS=127.0.0.1/32
nohup $PY -m uvicorn config.asgi:application --host 127.0.0.1 --port "$PORT" \
  --loop uvloop --http httptools --no-access-log --timeout-keep-alive 75 >"$VAR/gateway.log" 2>&1 &
echo $! >"$VAR/gateway.pid"
nohup $PY -m celery -A config worker --pool solo --loglevel WARNING >"$VAR/worker.log" 2>&1 &
echo $! >"$VAR/worker.pid"
{
  echo "var_dir=$VAR"
  for name in gateway worker stub; do echo "$name=$(cat "$VAR/$name.pid")"; done
} >"$RECORD.tmp" && mv "$RECORD.tmp" "$RECORD"

for _ in $(seq 1 100); do
  if curl -fsS "http://127.0.0.1:$PORT/healthz" >/dev/null 2>&1 \
     && curl -fsS "http://127.0.0.1:$STUB_PORT/_stub/health" >/dev/null 2>&1; then
    break
  fi
  sleep 0.1
done
curl -fsS "http://127.0.0.1:$PORT/healthz" >/dev/null || { echo "gateway did not start; see $VAR/gateway.log" >&2; exit 1; }

curl_line="curl -sSN http://127.0.0.1:$PORT/v1/chat/completions -H 'Authorization: Bearer $api_key' -H 'Content-Type: application/json' -d '{\"model\":\"gpt-4o-mini\",\"stream\":true,\"messages\":[{\"role\":\"user\",\"content\":\"Say hello\"}]}'"
echo "Tollgate is running: gateway http://127.0.0.1:$PORT (pid $(cat "$VAR/gateway.pid")), stub http://127.0.0.1:$STUB_PORT; logs in $VAR/, stop with make stop."
echo
echo "A streamed completion through Tollgate:"
eval "$curl_line"
echo
echo "Try it yourself:"
echo "$curl_line"
echo
site="http://127.0.0.1:$STUB_PORT/_stub/site"
auth="-H 'Authorization: Bearer $api_key' -H 'Content-Type: application/json'"
echo "Scrape, search and crawl with the same key (pages and queries are billed as units):"
echo "curl -sS http://127.0.0.1:$PORT/v1/web/scrape $auth -d '{\"url\":\"$site/\",\"formats\":[\"markdown\"]}'"
echo "curl -sS http://127.0.0.1:$PORT/v1/web/scrape $auth -d '{\"url\":\"$site/app\"}'"
echo "curl -sS http://127.0.0.1:$PORT/v1/web/search $auth -d '{\"query\":\"llm gateways\",\"max_results\":3}'"
echo "curl -sS http://127.0.0.1:$PORT/v1/web/crawl $auth -d '{\"url\":\"$site/\",\"max_pages\":5}'"
echo "curl -sS http://127.0.0.1:$PORT/v1/web/jobs/<id from the crawl> -H 'Authorization: Bearer $api_key'"
echo
echo "Log in with a browser (fresh passwords on each make run; shown only here):"
echo "Django admin (operators): http://127.0.0.1:$PORT/django-admin/ user $operator_user password $operator_password"
echo "Tenant dashboard (demo owner): http://127.0.0.1:$PORT/login/ user $owner_user password $owner_password"
echo
echo "The demo tenant's API token (keys, groups, budgets, usage; docs at http://127.0.0.1:$PORT/api/docs/):"
echo "curl -sS http://127.0.0.1:$PORT/api/account -H 'Authorization: Token $api_token'"
echo
echo "Management commands on this run (its database is in $VAR):"
# With this run's address: links a command prints (create_tenant's password link) point here.
echo "cd $(pwd -P) && TOLLGATE_VAR_DIR=$VAR TOLLGATE_PUBLIC_URL=$TOLLGATE_PUBLIC_URL $(command -v "$PY" | sed "s|^\([^/]\)|$(pwd -P)/\1|") manage.py create_tenant --name acme --wallet-micro 5000000 --json"
echo
echo "Point the official SDKs at Tollgate:"
echo "export OPENAI_BASE_URL=http://127.0.0.1:$PORT/v1"
echo "export OPENAI_API_KEY=$api_key"
echo "export ANTHROPIC_BASE_URL=http://127.0.0.1:$PORT"
echo "export ANTHROPIC_API_KEY=$api_key"
