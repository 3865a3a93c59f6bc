#!/usr/bin/env bash
# git's own test of external credential helpers, t/t0303-credential-external.sh, against
# git-credential-coffer (`make test-git-credential` runs this). It needs git's source tree at the
# installed git's version (`git --version`) beside the project, in ../git or $GIT_SOURCE, with
# its test tool built (no network here; commit none of it):
#   git clone --depth 1 --branch v2.39.5 https://github.com/git/git ../git
#   make -C ../git NO_GETTEXT=1 NO_CURL=1 NO_EXPAT=1 NO_TCLTK=1 NO_PERL=1 NO_PYTHON=1 \
#     GIT-BUILD-OPTIONS t/helper/test-tool && make -C ../git/templates
# The suite runs the installed git (GIT_TEST_INSTALLED) with the helper on PATH, on a fresh vault
# in a temporary folder (a debug build: its test-only fast key derivation).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
project="$(dirname "$here")"
source="${GIT_SOURCE:-$(dirname "$project")/git}"
git_bin="$(dirname "$(command -v git)")"
version="$(git --version | awk '{print $3}')"
if [ ! -f "$source/t/t0303-credential-external.sh" ]; then
  echo "test-git-credential: no git source tree at $source: put git $version's there (see $0)" >&2
  exit 1
fi
if ! grep -q "^DEF_VER=v$version\$" "$source/GIT-VERSION-GEN"; then
  echo "test-git-credential: $source is not git $version's source ($(grep '^DEF_VER=' "$source/GIT-VERSION-GEN"))" >&2
  exit 1
fi
if [ ! -x "$source/t/helper/test-tool" ] || [ ! -d "$source/templates/blt" ]; then
  echo "test-git-credential: build git's test tool first (see $0)" >&2
  exit 1
fi
cd "$project"
swift build -Xswiftc -warnings-as-errors --product coffer >&2
coffer="$(swift build --show-bin-path)/coffer"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir "$work/bin"
ln -s "$coffer" "$work/bin/git-credential-coffer"
export COFFER_VAULT="$work/vault.coffer"
export COFFER_PASSPHRASE="t0303-$$-$RANDOM$RANDOM"
COFFER_TEST_FAST_KDF=1 "$coffer" init >/dev/null 2>&1
cd "$source/t"
echo "PATH=$work/bin:\$PATH GIT_TEST_INSTALLED=$git_bin GIT_TEST_CREDENTIAL_HELPER=coffer sh t0303-credential-external.sh -v" >&2
PATH="$work/bin:$PATH" GIT_TEST_INSTALLED="$git_bin" GIT_TEST_CREDENTIAL_HELPER=coffer \
  sh t0303-credential-external.sh -v
