#!/usr/bin/env bash
# `make stop`: stop what `make run` started.
cd "$(dirname "$0")/.."
for name in gateway stub; do
  if [ -f "var/$name.pid" ]; then
    kill "$(cat "var/$name.pid")" 2>/dev/null || true
    rm -f "var/$name.pid"
  fi
done
