#!/usr/bin/env bash
# Runs a command with a throwaway PostgreSQL server: initdb into a temporary directory (as
# `nobody` under root), pg_ctl start on a free loopback port, COFFER_STORE set to its URL, then
# the server stopped and its files removed. COFFER_PG_BIN is set to the server's programs (psql
# is there). Used by `make bench-postgres` and scripts/demo-fleet.sh.
#   scripts/with-postgres.sh COMMAND [ARGUMENTS…]
set -euo pipefail
BIN="${COFFER_PG_BIN:-$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)}"
[ -x "$BIN/pg_ctl" ] || { echo "with-postgres: PostgreSQL is not installed (run scripts/install-postgres.sh)" >&2; exit 1; }
dir="$(mktemp -d /tmp/coffer-pg-XXXXXX)"
as_server() { if [ "$(id -u)" -eq 0 ]; then runuser -u nobody -- "$@"; else "$@"; fi; }
[ "$(id -u)" -eq 0 ] && chown nobody "$dir"
port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
cleanup() {
  as_server "$BIN/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null 2>&1 || true
  rm -rf "$dir"
}
trap cleanup EXIT
as_server "$BIN/initdb" -D "$dir/data" -U coffer --auth=trust -E UTF8 --locale=C >/dev/null
as_server "$BIN/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w \
  -o "-p $port -k $dir -c listen_addresses=127.0.0.1" start >/dev/null
export COFFER_STORE="postgres://coffer@127.0.0.1:$port/postgres?sslmode=disable"
export COFFER_PG_BIN="$BIN"
"$@"
