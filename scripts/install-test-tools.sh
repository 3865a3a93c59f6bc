#!/usr/bin/env bash
# Installs the programs the CLI tests drive for real when they are missing: age and age-keygen
# (sealed export and import), keyctl (the kept-key tests attack the kernel keyring with it) and
# gpg (the `pass` import); on Debian/Ubuntu also PyNaCl (python3-nacl), which the independent
# vault reader (Tools/vault-reader.py) needs in the vault tests. Debian/Ubuntu via apt-get,
# macOS via Homebrew (where `make test` installs PyNaCl with pip). Idempotent.
set -euo pipefail

missing=()
command -v age >/dev/null 2>&1 && command -v age-keygen >/dev/null 2>&1 || missing+=(age)
command -v gpg >/dev/null 2>&1 || missing+=(gnupg)
if [ "$(uname -s)" = Linux ]; then
  command -v keyctl >/dev/null 2>&1 || missing+=(keyutils)
  # Debian's package serves Debian's python3 only; another python3 first on PATH (pyenv, a
  # virtual environment) gets PyNaCl from pip in `make test`.
  if command -v apt-get >/dev/null 2>&1 && [ "$(command -v python3)" = /usr/bin/python3 ] \
    && ! python3 -c 'import nacl' >/dev/null 2>&1; then
    missing+=(python3-nacl)
  fi
fi
[ ${#missing[@]} -eq 0 ] && exit 0

if command -v apt-get >/dev/null 2>&1; then
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  echo "coffer: installing ${missing[*]} with apt-get (the CLI tests run them)" >&2
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
elif command -v brew >/dev/null 2>&1; then
  echo "coffer: installing ${missing[*]} with Homebrew (the CLI tests run them)" >&2
  brew install "${missing[@]/keyutils/}"
else
  echo "coffer: the CLI tests need ${missing[*]}; install them and run again." >&2
  exit 1
fi
