#!/usr/bin/env bash
# `make demo-fleet`: a throwaway PostgreSQL server, two application processes following a secret
# of a vault kept in it, and `coffer --store postgres://…` rotating that secret: both processes'
# models change within milliseconds, with no restart. Everything is removed at the end.
set -euo pipefail
cd "$(dirname "$0")/.."

BIN="${COFFER_PG_BIN:-$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)}"
[ -x "$BIN/pg_ctl" ] || { echo "demo-fleet: PostgreSQL is not installed (run scripts/install-postgres.sh)" >&2; exit 1; }
PRODUCTS="${COFFER_BIN_PATH:-$(swift build --show-bin-path --enable-all-traits)}"
COFFER="$PRODUCTS/coffer"
HELPER="$PRODUCTS/CofferTestHelper"

dir="$(mktemp -d /tmp/coffer-demo-fleet-XXXXXX)"
as_server() { if [ "$(id -u)" -eq 0 ]; then runuser -u nobody -- "$@"; else "$@"; fi; }
[ "$(id -u)" -eq 0 ] && chown nobody "$dir"
port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
cleanup() {
  as_server "$BIN/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null 2>&1 || true
  rm -rf "$dir"
}
trap cleanup EXIT

echo "== A throwaway PostgreSQL server on 127.0.0.1:$port ($dir)"
as_server "$BIN/initdb" -D "$dir/data" -U coffer --auth=trust -E UTF8 --locale=C >/dev/null
as_server "$BIN/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w \
  -o "-p $port -k $dir -c listen_addresses=127.0.0.1" start >/dev/null

URL="postgres://coffer@127.0.0.1:$port/postgres?sslmode=disable"
key="$(mktemp /tmp/coffer-demo-fleet-key-XXXXXX)"
head -c 32 /dev/urandom > "$key"
trap 'cleanup; rm -f "$key"' EXIT
export COFFER_FLEET_KEY_FILE="$key"

echo "== coffer stores the first secret (the vault 'fleet' is created in the database)"
printf '%s' "token-v1" | "$COFFER" --store "$URL&vault=fleet" --key-file "$key" set fleet deploy-token

echo "== Two application processes follow @Stored(backed: .vault(fleetVault, service: \"fleet\", account: \"deploy-token\"))"
for name in A B; do
  (sleep 8) | "$HELPER" pg-follow "$URL" vault fleet deploy-token 6 | sed -u "s/^/   instance $name: /" &
done
sleep 2

echo "== coffer rotates the secret for the whole fleet"
printf '%s' "token-v2" | "$COFFER" --store "$URL&vault=fleet" --key-file "$key" set fleet deploy-token
sleep 1
echo "== ... and once more"
printf '%s' "token-v3" | "$COFFER" --store "$URL&vault=fleet" --key-file "$key" set fleet deploy-token
sleep 1

echo "== What the database holds (ciphertext, sizes, versions; no names):"
as_server "$BIN/psql" -X -h 127.0.0.1 -p "$port" -U coffer -d postgres -c \
  "SELECT encode(substr(row_key, 1, 8), 'hex') AS row_key, length(record) AS sealed_bytes, version FROM coffer_vault_rows"
wait
echo "== Done: both processes followed each rotation; the server and its files are removed."
