#!/usr/bin/env bash
# headline.sh runs one big Job on `jobkeeper up` as a user would, and prints
# what it cost: wall time to Complete, the up process's CPU and peak RSS, and
# the apiserver's requests per pod (every client: controllers, node agent,
# garbage collector).
#
#   bench/headline.sh                       # 100,000 completions, parallelism 500, Indexed
#   COMPLETION_MODE=NonIndexed bench/headline.sh
#   COMPLETIONS=10000 bench/headline.sh -- --kube-api-qps=500 --kube-api-burst=1000
#
# Everything after -- is passed to `jobkeeper up`. The pods run on the
# simulated runtime (no processes), so the controllers and the apiserver are
# what is measured. The Job is Indexed, as issue 27 states its goals
# (COMPLETION_MODE=NonIndexed for the other mode). Needs kubectl on PATH. Exits
# non-zero unless the Job completes with exactly COMPLETIONS succeeded, none
# failed, and no pod left holding the tracking finalizer.
#
# It also prints how often pod watches were re-opened during the run (every
# client's: a watch the apiserver ends is re-opened by its reflector), and,
# for 10,000 and 100,000 completions, whether issue 27's goals are met.
# BIN=path runs an already built binary instead of building this tree.
set -euo pipefail
cd "$(dirname "$0")/.."

COMPLETIONS=${COMPLETIONS:-100000}
PARALLELISM=${PARALLELISM:-500}
COMPLETION_MODE=${COMPLETION_MODE:-Indexed}
case $COMPLETION_MODE in Indexed|NonIndexed) ;; *) echo "COMPLETION_MODE must be Indexed or NonIndexed, not $COMPLETION_MODE" >&2; exit 2 ;; esac
TIMEOUT=${TIMEOUT:-1800}
UP_ARGS=()
if [ "${1:-}" = "--" ]; then shift; UP_ARGS=("$@"); fi

work=$(mktemp -d /tmp/jobkeeper-headline-XXXXXX)
bin=${BIN:-$work/jobkeeper}
[ -n "${BIN:-}" ] || go build -o "$bin" ./cmd/jobkeeper
port=$(( 20000 + RANDOM % 20000 ))
"$bin" up --data-dir "$work/data" --port "$port" --runtime simulated --max-pods $((PARALLELISM + 10)) \
  "${UP_ARGS[@]}" >"$work/up.out" 2>&1 &
up_pid=$!
cleanup() { kill "$up_pid" 2>/dev/null || true; wait "$up_pid" 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
export KUBECONFIG=$work/data/kubeconfig
for _ in $(seq 1 100); do
  grep -q 'jobkeeper is up' "$work/up.out" 2>/dev/null && break
  sleep 0.2
done
grep -q 'jobkeeper is up' "$work/up.out" || { cat "$work/up.out"; exit 1; }
kubectl wait --for=condition=Ready node --all --timeout=60s >/dev/null

cpu_ticks() { awk '{print $14 + $15}' "/proc/$up_pid/stat"; }
requests() { kubectl get --raw /metrics | awk '/^apiserver_request_total\{/ && /resource="(pods|jobs|events)"/ {split($0, a, " "); s += a[2]} END {printf "%d", s}'; }
# A watch is counted in apiserver_request_total when it ends; the watchers
# the apiserver's watch cache closed for being slow are counted apart.
pod_watches_ended() { kubectl get --raw /metrics | awk '/^apiserver_request_total\{/ && /resource="pods"/ && /verb="WATCH"/ {split($0, a, " "); s += a[2]} END {printf "%d", s}'; }
pod_watchers_closed() { kubectl get --raw /metrics | awk '/^apiserver_terminated_watchers_total\{/ && /resource="pods"/ {split($0, a, " "); s += a[2]} END {printf "%d", s}'; }

req0=$(requests)
watches0=$(pod_watches_ended)
closed0=$(pod_watchers_closed)
cpu0=$(cpu_ticks)
start=$(date +%s.%N)
kubectl apply -f - >/dev/null <<EOF
apiVersion: batch/v1
kind: Job
metadata:
  name: headline
spec:
  completions: $COMPLETIONS
  parallelism: $PARALLELISM
  completionMode: $COMPLETION_MODE
  backoffLimit: 0
  template:
    metadata:
      annotations:
        jobkeeper.dev/simulate-duration: "0s"
    spec:
      restartPolicy: Never
      containers:
      - name: main
        image: busybox
        command: ["true"]
EOF
kubectl wait --for=condition=Complete job/headline --timeout="${TIMEOUT}s" >/dev/null
wall=$(echo "$(date +%s.%N) - $start" | bc)
# The run ends when no pod holds the tracking finalizer (one list of every
# pod, so the first check is slow on big Jobs: it is not part of the wall time).
finalizers() { kubectl get pods -l batch.kubernetes.io/job-name=headline -o jsonpath='{range .items[*]}{.metadata.finalizers}{"\n"}{end}' | grep -c job-tracking || true; }
left=$(finalizers)
left_at_complete=$left
while [ "$left" != 0 ]; do
  sleep 1
  left=$(finalizers)
done
cpu=$(echo "($(cpu_ticks) - $cpu0) / $(getconf CLK_TCK)" | bc -l)
req=$(( $(requests) - req0 ))
reopened=$(( $(pod_watches_ended) - watches0 ))
closed=$(( $(pod_watchers_closed) - closed0 ))
hwm=$(awk '/VmHWM/ {print $2}' "/proc/$up_pid/status")
status=$(kubectl get job headline -o jsonpath='{.status.succeeded} {.status.failed}')
read -r succeeded failed <<<"$status"
printf '%s Job, completions %d, parallelism %d, up flags: %s\n' "$COMPLETION_MODE" "$COMPLETIONS" "$PARALLELISM" "${UP_ARGS[*]:-(defaults)}"
printf 'wall to Complete %.1fs; pods holding the tracking finalizer at Complete: %d\n' "$wall" "$left_at_complete"
printf 'jobkeeper up (apiserver, etcd, controllers, node agent): CPU %.1fs, peak RSS %d MiB\n' "$cpu" $((hwm / 1024))
printf 'apiserver requests on pods, jobs and events: %d (%.2f per pod, every client)\n' "$req" "$(echo "$req / $COMPLETIONS" | bc -l)"
printf 'pod watches re-opened: %d (closed by the watch cache for being slow: %d)\n' "$reopened" "$closed"
printf 'succeeded %s, failed %s\n' "$succeeded" "${failed:-0}"
printf 'load average at the end: %s\n' "$(cut -d' ' -f1-3 /proc/loadavg)"
# Issue 27's goals for `up` at scale.
verdict() { if [ "$1" = 1 ]; then echo met; else echo "not met"; fi; }
mib=$((hwm / 1024))
case $COMPLETIONS in
10000)
  printf 'goal: wall <= 30 s: %s; peak RSS <= 800 MiB: %s; pod watch re-opened at most once: %s\n' \
    "$(verdict "$(echo "$wall <= 30" | bc)")" "$(verdict $((mib <= 800)))" "$(verdict $((reopened <= 1)))" ;;
100000)
  printf 'goal: wall < 5 min: %s; peak RSS <= 2 GiB: %s\n' \
    "$(verdict "$(echo "$wall < 300" | bc)")" "$(verdict $((mib <= 2048)))" ;;
*)
  echo "goal: none for $COMPLETIONS completions (issue 27 sets them for 10,000 and 100,000)" ;;
esac
[ "$succeeded" = "$COMPLETIONS" ] && [ "${failed:-0}" = 0 ]
