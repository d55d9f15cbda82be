#!/usr/bin/env bash
# `make stop`: stop what `make run` started, from any shell. make run records its var dir and
# pids in this checkout's var/make-run; the pid files in $TOLLGATE_VAR_DIR (default var/) are
# read too. A pid is signalled only while it is still that process of this checkout (its
# command line, and on Linux its working directory), never a stale pid's new owner.
set -o pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd -P)
RECORD=var/make-run
VAR=${TOLLGATE_VAR_DIR:-var}

alive() {  # a zombie has exited; only its parent can reap it
  local state
  state=$(ps -o stat= -p "$1" 2>/dev/null) || return 1
  [[ $state != Z* ]]
}

ours() {  # ours NAME PID: is PID still the NAME process make run started here?
  local args
  args=$(ps -ww -o args= -p "$2" 2>/dev/null) || return 1
  case $1 in
    gateway) [[ $args == *"-m uvicorn config.asgi:application"* ]] || return 1 ;;
    worker) [[ $args == *"-m celery -A config worker"* ]] || return 1 ;;
    stub) [[ $args == *"manage.py runstub"* ]] || return 1 ;;
    *) return 1 ;;
  esac
  if [ -d /proc/self ]; then
    [ "$(readlink "/proc/$2/cwd" 2>/dev/null)" = "$ROOT" ] || return 1
  fi
}

stop_pid() {  # TERM, up to 10 s to finish, then KILL
  kill -TERM "$1" 2>/dev/null || return 0
  for _ in $(seq 1 100); do alive "$1" || return 0; sleep 0.1; done
  kill -KILL "$1" 2>/dev/null
  for _ in $(seq 1 20); do alive "$1" || return 0; sleep 0.1; done
  return 1
}

# Candidates, "name pid where", from the record and from the pid files of $VAR.
candidates=()
if [ -f "$RECORD" ]; then
  recorded_var=$(sed -n 's/^var_dir=//p' "$RECORD")
  for name in gateway worker stub; do
    pid=$(sed -n "s/^$name=//p" "$RECORD")
    [ -n "$pid" ] && candidates+=("$name $pid $recorded_var")
  done
fi
for name in gateway worker stub; do
  if [ -f "$VAR/$name.pid" ]; then
    candidates+=("$name $(cat "$VAR/$name.pid") $(cd "$VAR" && pwd -P)")
  fi
done

stopped=()
failed=0
seen=" "
for entry in "${candidates[@]}"; do
  read -r name pid dir <<<"$entry"
  [[ $pid =~ ^[0-9]+$ ]] || continue
  [[ $seen == *" $pid "* ]] && continue
  seen="$seen$pid "
  if ! alive "$pid"; then
    continue
  elif ! ours "$name" "$pid"; then
    echo "make stop: pid $pid (the $name of the make run in $dir) is now another process; left it alone"
  elif stop_pid "$pid"; then
    stopped+=("$name (pid $pid)")
    dirs_stopped=$dir
  else
    echo "make stop: could not stop the $name (pid $pid) of the make run in $dir" >&2
    failed=1
  fi
done

if [ "$failed" = 0 ]; then
  rm -f "$RECORD"
  for name in gateway worker stub; do rm -f "$VAR/$name.pid"; done
  if [ -n "$recorded_var" ]; then
    for name in gateway worker stub; do rm -f "$recorded_var/$name.pid"; done
  fi
fi
if [ ${#stopped[@]} -gt 0 ]; then
  list=$(printf '%s, ' "${stopped[@]}")
  echo "make stop: stopped ${list%, } of the make run in $dirs_stopped"
elif [ "$failed" = 0 ]; then
  echo "nothing to stop: no make run found running (looked in $RECORD and $VAR/*.pid)"
fi
exit "$failed"
