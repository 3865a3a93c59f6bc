#!/usr/bin/env bash
# Installs `coffer` with its shell completions and its manual page, all generated from the
# command definitions of the binary being installed (`make install PREFIX=…` runs this):
#   scripts/install.sh PATH-TO-COFFER PREFIX
#     PREFIX/bin/coffer
#     PREFIX/bin/git-credential-coffer, docker-credential-coffer  (links to coffer: the credential helpers)
#     PREFIX/share/man/man1/coffer.1                        (scripts/man-page.py)
#     PREFIX/share/bash-completion/completions/coffer       (coffer --generate-completion-script bash)
#     PREFIX/share/zsh/site-functions/_coffer               (… zsh)
#     PREFIX/share/fish/vendor_completions.d/coffer.fish    (… fish)
# Everything is generated into a temporary folder first, so a failure installs nothing.
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: scripts/install.sh PATH-TO-COFFER PREFIX" >&2; exit 2; }
bin="$1"
prefix="$2"
[ -x "$bin" ] || { echo "install: $bin is not an executable (build it first: make install does)" >&2; exit 1; }
here="$(cd "$(dirname "$0")" && pwd)"
staging="$(mktemp -d)"
trap 'rm -rf "$staging"' EXIT
"$bin" --generate-completion-script bash > "$staging/coffer.bash"
"$bin" --generate-completion-script zsh > "$staging/_coffer"
"$bin" --generate-completion-script fish > "$staging/coffer.fish"
"$bin" --experimental-dump-help | python3 "$here/man-page.py" > "$staging/coffer.1"
install -d "$prefix/bin" "$prefix/share/man/man1" "$prefix/share/bash-completion/completions" \
  "$prefix/share/zsh/site-functions" "$prefix/share/fish/vendor_completions.d"
install -m 0755 "$bin" "$prefix/bin/coffer"
ln -sfn coffer "$prefix/bin/git-credential-coffer"
ln -sfn coffer "$prefix/bin/docker-credential-coffer"
install -m 0644 "$staging/coffer.1" "$prefix/share/man/man1/coffer.1"
install -m 0644 "$staging/coffer.bash" "$prefix/share/bash-completion/completions/coffer"
install -m 0644 "$staging/_coffer" "$prefix/share/zsh/site-functions/_coffer"
install -m 0644 "$staging/coffer.fish" "$prefix/share/fish/vendor_completions.d/coffer.fish"
echo "installed coffer, its git and docker credential helpers, its manual page and its bash, zsh and fish completions under $prefix"
