#!/usr/bin/env bash
# Install the Go linters the mixin checks use (pint, dashboard-linter) into go-bin in connmon's
# per-user cache, the folder streaming.stack.artifacts.cache_dir() names:
# $CONNMON_CACHE_DIR if set, else ${XDG_CACHE_HOME:-$HOME/.cache}/connmon ($CONNMON_GO_BIN
# overrides the whole path). Idempotent: a tool already installed at the pinned version is
# left alone, so a second run, from any checkout, downloads nothing.
set -euo pipefail

CACHE_DIR="${CONNMON_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/connmon}"
GOBIN_DIR="${CONNMON_GO_BIN:-$CACHE_DIR/go-bin}"
PINT_VERSION="${PINT_VERSION:-latest}"
LINTER_VERSION="${DASHBOARD_LINTER_VERSION:-latest}"

if ! command -v go >/dev/null 2>&1; then
  if [ -x /usr/local/go/bin/go ]; then
    PATH="/usr/local/go/bin:$PATH"
  else
    echo "install-tools.sh: Go is not installed (needed for pint and dashboard-linter)" >&2
    exit 1
  fi
fi
mkdir -p "$GOBIN_DIR"

install_tool() { # name module version
  local name="$1" module="$2" version="$3" stamp="$GOBIN_DIR/.$1.version"
  if [ -x "$GOBIN_DIR/$name" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$version" ]; then
    return 0
  fi
  echo ">> go install $module@$version -> $GOBIN_DIR" >&2
  GOBIN="$GOBIN_DIR" GOFLAGS="-buildvcs=false" go install "$module@$version"
  echo "$version" >"$stamp"
}

install_tool pint github.com/cloudflare/pint/cmd/pint "$PINT_VERSION"
install_tool dashboard-linter github.com/grafana/dashboard-linter "$LINTER_VERSION"
echo "$GOBIN_DIR"
