#!/usr/bin/env bash
# Checks the alerting rules the chart ships (deploy/helm/jobkeeper/files/prometheus-rules.yaml):
#   promtool check rules   the file is valid (PromQL parses, templates compile)
#   promtool test rules    deploy/monitoring/tests/*.yaml: each alert fires, and does not, when it should
# Usage: deploy/monitoring/promtool.sh   (CI runs it from .ci/run)
#
# promtool comes from Debian's prometheus package: the .deb is downloaded with
# apt-get and only promtool is unpacked into a cache directory (nothing is
# installed, no Prometheus server is set up). That takes a few seconds, where
# building promtool from the Go module proxy takes about 10 minutes and 1.8 GB
# of modules. Set PROMTOOL=/path/to/promtool to use another one (the tests pass
# with promtool 2.42 and 3.x).
set -euo pipefail
cd "$(dirname "$0")/../.."

RULES=deploy/helm/jobkeeper/files/prometheus-rules.yaml
TESTS=deploy/monitoring/tests

tools_dir=${JOBKEEPER_TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/jobkeeper-tools}

# candidate_version prints the version apt would download, refreshing the
# package lists once if apt knows no candidate yet (a fresh machine).
candidate_version() {
  local v
  v=$(apt-cache policy prometheus 2>/dev/null | awk '/Candidate:/ {print $2}')
  if [ -z "$v" ] || [ "$v" = "(none)" ]; then
    echo "refreshing apt's package lists" >&2
    apt-get update -qq >&2
    v=$(apt-cache policy prometheus | awk '/Candidate:/ {print $2}')
  fi
  if [ -z "$v" ] || [ "$v" = "(none)" ]; then
    echo "apt has no prometheus package; set PROMTOOL=/path/to/promtool" >&2
    return 1
  fi
  echo "$v"
}

# promtool_path prints the path of promtool, unpacking it first if needed.
promtool_path() {
  if [ -n "${PROMTOOL:-}" ]; then
    echo "$PROMTOOL"
    return
  fi
  if ! command -v apt-get >/dev/null; then
    if command -v promtool >/dev/null; then
      command -v promtool
      return
    fi
    echo "no apt-get to fetch promtool with, and none on PATH; set PROMTOOL=/path/to/promtool" >&2
    return 1
  fi
  local version dir
  version=$(candidate_version)
  dir=$tools_dir/promtool-debian-${version//[^A-Za-z0-9.+-]/_}
  if [ ! -x "$dir/promtool" ]; then
    echo "unpacking promtool from Debian's prometheus $version into $dir" >&2
    local scratch
    scratch=$(mktemp -d)
    (cd "$scratch" && apt-get download -q "prometheus=$version" >&2)
    mkdir -p "$dir"
    dpkg-deb --fsys-tarfile "$scratch"/prometheus_*.deb | tar -x -O ./usr/bin/promtool >"$dir/promtool.tmp"
    chmod +x "$dir/promtool.tmp"
    mv "$dir/promtool.tmp" "$dir/promtool"
    rm -rf "$scratch"
  fi
  echo "$dir/promtool"
}

promtool=$(promtool_path)
"$promtool" --version 2>&1 | head -n 1
"$promtool" check rules "$RULES"
shopt -s nullglob
tests=("$TESTS"/*.yaml)
if [ ${#tests[@]} -eq 0 ]; then
  echo "no rule tests in $TESTS" >&2
  exit 1
fi
"$promtool" test rules "${tests[@]}"
