#!/usr/bin/env bash
# Jaeger (v2: the OpenTelemetry Collector-based all-in-one) built from its Go module, for the
# tests that follow an action's trace through a real trace backend. Cached outside the
# clone, as Maven caches the broker's jars: a second build is instant.
#
#   deploy/local/jaeger.sh build   # go build ./cmd/jaeger of github.com/jaegertracing/jaeger@VERSION
#   deploy/local/jaeger.sh path    # the binary's path (exit 1 when not built)
#
# JAEGER_VERSION (default below) picks the module version; LAGPILOT_CACHE the cache folder
# (default ~/.cache/lagpilot). The build needs Go (https://go.dev/dl) and the Go module
# proxy; it takes a few minutes once.
set -euo pipefail

VERSION="${JAEGER_VERSION:-v1.75.0}"
CACHE="${LAGPILOT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/lagpilot}"
DIR="$CACHE/jaeger-$VERSION"
BIN="$DIR/jaeger"

case "${1:-}" in
  path)
    [ -x "$BIN" ] || { echo "jaeger $VERSION is not built: run make test (or $0 build)" >&2; exit 1; }
    echo "$BIN"
    ;;
  build)
    [ -x "$BIN" ] && exit 0
    if ! command -v go >/dev/null; then
      echo "error: Go is not installed; the trace tests need Jaeger built from its module: install Go (https://go.dev/dl, or apt-get install golang-go), then run make test" >&2
      exit 1
    fi
    echo "building Jaeger $VERSION from its Go module (once; cached in $DIR) ..."
    mkdir -p "$DIR"
    tmp="$(mktemp -d "$DIR/build.XXXXXX")"
    trap 'rm -rf "$tmp"' EXIT
    # `go install ...@version` refuses a module whose go.mod has replace directives (Jaeger's
    # pins a sarama version): build it as the main module, from its source in the module cache
    src="$(go mod download -json "github.com/jaegertracing/jaeger@$VERSION" |
           sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
    [ -d "$src" ] || { echo "error: go mod download gave no source for jaeger $VERSION" >&2; exit 1; }
    cp -R "$src" "$tmp/src" && chmod -R u+w "$tmp/src"
    (cd "$tmp/src" && CGO_ENABLED=0 go build -trimpath -o "$tmp/jaeger" ./cmd/jaeger)
    mv "$tmp/jaeger" "$BIN"
    echo "built $BIN"
    ;;
  *)
    echo "usage: $0 build|path" >&2
    exit 2
    ;;
esac
