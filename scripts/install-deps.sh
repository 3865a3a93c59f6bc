#!/usr/bin/env bash
# Installs what Coffer needs to build when it is missing: libsodium (headers and pkg-config file)
# and pkg-config. Debian/Ubuntu via apt-get, macOS via Homebrew. Idempotent.
set -euo pipefail

have_sodium() { command -v pkg-config >/dev/null 2>&1 && pkg-config --exists libsodium; }

if have_sodium; then
  exit 0
fi

if command -v apt-get >/dev/null 2>&1; then
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  echo "coffer: installing libsodium-dev and pkg-config with apt-get" >&2
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq libsodium-dev pkg-config >/dev/null
elif command -v brew >/dev/null 2>&1; then
  echo "coffer: installing libsodium and pkg-config with Homebrew" >&2
  brew install libsodium pkg-config
else
  echo "coffer: libsodium is missing and neither apt-get nor brew is available;" >&2
  echo "        install libsodium (headers and pkg-config file) and run again." >&2
  exit 1
fi

if ! have_sodium; then
  echo "coffer: libsodium was installed but pkg-config still cannot find it" >&2
  exit 1
fi
