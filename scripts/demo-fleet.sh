#!/usr/bin/env bash
# `make demo-fleet`: a throwaway PostgreSQL server, two application processes following a secret
# of a vault kept in it, and `coffer --store postgres://…` rotating that secret: both processes'
# models change within milliseconds, with no restart. Everything is removed at the end.
set -euo pipefail
cd "$(dirname "$0")/.."

# The server is scripts/with-postgres.sh's: it starts one, runs this script again inside (with
# COFFER_STORE set to the server's URL), then stops it and removes its files.
if [ -z "${COFFER_DEMO_FLEET_SERVER:-}" ]; then
  COFFER_DEMO_FLEET_SERVER=1 exec scripts/with-postgres.sh scripts/demo-fleet.sh "$@"
fi

PRODUCTS="${COFFER_BIN_PATH:-$(swift build --show-bin-path --enable-all-traits)}"
COFFER="$PRODUCTS/coffer"
HELPER="$PRODUCTS/CofferTestHelper"
URL="$COFFER_STORE"
echo "== A throwaway PostgreSQL server: $URL"

key="$(mktemp /tmp/coffer-demo-fleet-key-XXXXXX)"
head -c 32 /dev/urandom > "$key"
trap 'rm -f "$key"' EXIT
export COFFER_FLEET_KEY_FILE="$key"

echo "== coffer creates the vault 'fleet' in the database and stores the first secret"
"$COFFER" --store "$URL&vault=fleet" --key-file "$key" init
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
"$COFFER_PG_BIN/psql" -X "$URL" -c \
  "SELECT encode(substr(row_key, 1, 8), 'hex') AS row_key, length(record) AS sealed_bytes, version FROM coffer_vault_rows"
wait
echo "== Done: both processes followed each rotation; the server and its files are removed."
