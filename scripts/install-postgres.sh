#!/usr/bin/env bash
# Installs PostgreSQL's server programs (initdb, pg_ctl, postgres, psql, pg_dump) when missing:
# the CofferPostgres tests, `make demo-fleet` and `make bench-postgres` (`coffer-bench postgres`) start a
# throwaway cluster with them. Debian/Ubuntu via apt-get (the distribution's `postgresql`,
# 15 on Debian 12), macOS via Homebrew. Idempotent; no cluster is created or started here.
set -euo pipefail

have_server() {
  if [ -n "${COFFER_PG_BIN:-}" ] && [ -x "$COFFER_PG_BIN/pg_ctl" ]; then return 0; fi
  for dir in /usr/lib/postgresql/*/bin; do
    if [ -x "$dir/pg_ctl" ] && [ -x "$dir/initdb" ]; then return 0; fi
  done
  command -v pg_ctl >/dev/null 2>&1 && command -v initdb >/dev/null 2>&1
}

if have_server; then
  exit 0
fi

if command -v apt-get >/dev/null 2>&1; then
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  echo "coffer: installing PostgreSQL (server programs) with apt-get" >&2
  $SUDO apt-get update -qq
  # The package's own cluster is not wanted: the tests make their own in a temporary directory.
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq postgresql >/dev/null
  if command -v pg_lsclusters >/dev/null 2>&1 && pg_lsclusters -h 2>/dev/null | grep -q online; then
    pg_lsclusters -h | while read -r version name _; do
      $SUDO pg_ctlcluster "$version" "$name" stop >/dev/null 2>&1 || true
    done
  fi
elif command -v brew >/dev/null 2>&1; then
  echo "coffer: installing PostgreSQL with Homebrew" >&2
  brew install postgresql@15
else
  echo "coffer: PostgreSQL is missing and neither apt-get nor brew is available;" >&2
  echo "        install its server programs (initdb, pg_ctl) and run again, or set COFFER_PG_BIN." >&2
  exit 1
fi

if ! have_server; then
  echo "coffer: PostgreSQL was installed but initdb and pg_ctl are still not found" >&2
  exit 1
fi
