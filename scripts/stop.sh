#!/usr/bin/env bash
# `make stop`: stop what `make run` started.
cd "$(dirname "$0")/.."
VAR=${TOLLGATE_VAR_DIR:-var}
for name in gateway worker stub; do
  if [ -f "$VAR/$name.pid" ]; then
    kill "$(cat "$VAR/$name.pid")" 2>/dev/null || true
    rm -f "$VAR/$name.pid"
  fi
done
