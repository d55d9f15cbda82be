#!/bin/sh
# Run redis-server as the redis user in /data, protected mode off (the official image is
# built with it off: the container network, not the loopback rule, is the boundary).
set -eu
if [ "${1:-}" = redis-server ]; then
    chown -R redis:redis /data
    shift
    exec setpriv --reuid=redis --regid=redis --init-groups redis-server --protected-mode no "$@"
fi
exec "$@"
