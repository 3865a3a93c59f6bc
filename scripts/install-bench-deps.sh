#!/usr/bin/env bash
# Installs what the nested benchmark package (Benchmarks/) needs beyond Coffer itself: the SQLite
# and LMDB peers' headers and pkg-config files. Debian/Ubuntu via apt-get, macOS via Homebrew.
# Idempotent: does nothing when both are present.
set -euo pipefail

have() { command -v pkg-config >/dev/null 2>&1 && pkg-config --exists sqlite3 && pkg-config --exists lmdb; }

if have; then
  exit 0
fi

if command -v apt-get >/dev/null 2>&1; then
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  echo "coffer: installing libsqlite3-dev and liblmdb-dev with apt-get (benchmark peers)" >&2
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq libsqlite3-dev liblmdb-dev pkg-config >/dev/null
elif command -v brew >/dev/null 2>&1; then
  echo "coffer: installing sqlite and lmdb with Homebrew (benchmark peers)" >&2
  brew install sqlite lmdb pkg-config
else
  echo "coffer: the benchmark peers need SQLite and LMDB (headers and pkg-config files);" >&2
  echo "        neither apt-get nor brew is available: install them and run again." >&2
  exit 1
fi

if ! have; then
  echo "coffer: SQLite and LMDB were installed but pkg-config cannot find both" >&2
  exit 1
fi
