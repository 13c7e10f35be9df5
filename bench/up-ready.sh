#!/usr/bin/env bash
# up-ready.sh [BINARY] [RUNS]: starts `BINARY up` RUNS times (default 5), each on a new data
# directory, and prints its ready time ("jobkeeper is up in X s") and its VmRSS 15 s after that;
# then the medians. BINARY defaults to a fresh `go build ./cmd/jobkeeper`.
set -euo pipefail
bin=${1:-}
runs=${2:-5}
if [ -z "$bin" ]; then
  bin=$(mktemp -d)/jobkeeper
  go build -o "$bin" "$(dirname "$0")/../cmd/jobkeeper"
fi
readies=() rsses=()
for _ in $(seq "$runs"); do
  d=$(mktemp -d)
  "$bin" up --data-dir "$d/data" --port 0 --kubeconfig-out "$d/kubeconfig" >"$d/out" 2>&1 &
  pid=$!
  for _ in $(seq 600); do grep -q "is up in" "$d/out" && break; sleep 0.1; done
  ready=$(grep -o "is up in [0-9.]*s" "$d/out" | head -1 | grep -o "[0-9.]*") || { cat "$d/out"; exit 1; }
  sleep 15
  rss=$(awk '/VmRSS/{printf "%.1f", $2/1024}' "/proc/$pid/status")
  echo "ready ${ready}s rss ${rss}MB"
  readies+=("$ready") rsses+=("$rss")
  kill -INT "$pid"; wait "$pid" || true
  rm -rf "$d"
done
median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
echo "median ready $(median "${readies[@]}")s rss $(median "${rsses[@]}")MB over $runs runs"
