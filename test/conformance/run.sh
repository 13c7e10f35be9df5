#!/usr/bin/env bash
# Run upstream's own [sig-apps] Job, TTLAfterFinished and CronJob e2e specs
# (or those --focus selects; k8s.io/kubernetes/test/e2e, the Kubernetes
# version of go.mod) against a private `jobkeeper up`, one e2e.test process
# per spec, and write the results into docs/conformance.md. See docs/conformance.md for what it measures.
#
# Needs Go, gcc, the Go module proxy, a static busybox (Debian's
# busybox-static) and Debian's curl, netcat-openbsd, bind9-dnsutils and bash
# for the images (no registry, no GitHub, no cluster). Heavy:
# the first run builds e2e.test and agnhost (tens of minutes on 2 cores),
# later runs reuse them.
set -euo pipefail

usage() {
	cat <<'EOF'
usage: test/conformance/run.sh [options]

  -j, --parallel N     specs run at a time (default 2; [Serial] specs always run alone)
  --timeout DUR        bound per spec: N, Ns, Nm or Nh (default 15m); a spec still
                       running is interrupted (SIGINT: ginkgo cleans up and reports),
                       killed 2 minutes later, and reported as a timeout
  --focus REGEX        ginkgo focus selecting the specs
                       (default '\[sig-apps\] (Job|TTLAfterFinished|CronJob) ')
  --results DIR        where per-spec logs and reports go
                       (default /tmp/jobkeeper-conformance-<date>)
  --doc FILE           markdown file whose generated section is rewritten
                       (default docs/conformance.md); --no-doc leaves it alone
  --at REV             build jobkeeper from git revision REV (a clean export)
                       instead of the working tree
  --rebuild            rebuild the cached e2e.test and agnhost
  --nice N             niceness of the e2e.test build, of up and of the runs (default 15)
  --images MODE        up's --images: oci (default: the specs' images are offline
                       stand-ins loaded into up's store first) or host
  --feature-gates G    up's --feature-gates (e.g. GenericWorkload=true,GangScheduling=true,
                       WorkloadWithJob=true, which the alpha gang spec needs); every
                       spec of the run then meets a cluster with those gates
  --busybox PATH       the static busybox the busybox stand-in is built from
                       (default /bin/busybox: apt-get install busybox-static)
  --as-user USER       run up as USER (from root, with setpriv) with --network=pod:
                       the rootless node, linked to this host by pasta (the specs
                       still run as root)
  -h, --help

Environment: JOBKEEPER_CONFORMANCE_CACHE (default ~/.cache/jobkeeper/conformance)
holds the scratch modules, e2e.test and agnhost, one directory per Kubernetes version.
EOF
}

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
parallel=2
spec_timeout=15m
focus='\[sig-apps\] (Job|TTLAfterFinished|CronJob) '
results=""
doc="$root/docs/conformance.md"
at=""
rebuild=0
niceness=15
images=oci
busybox=/bin/busybox
feature_gates=""
as_user=""
cache="${JOBKEEPER_CONFORMANCE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/jobkeeper/conformance}"
command_line="test/conformance/run.sh${*:+ $*}"

while [ $# -gt 0 ]; do
	case "$1" in
	-j | --parallel) parallel=$2; shift 2 ;;
	--timeout) spec_timeout=$2; shift 2 ;;
	--focus) focus=$2; shift 2 ;;
	--results) results=$2; shift 2 ;;
	--doc) doc=$2; shift 2 ;;
	--no-doc) doc=""; shift ;;
	--at) at=$2; shift 2 ;;
	--rebuild) rebuild=1; shift ;;
	--nice) niceness=$2; shift 2 ;;
	--images) images=$2; shift 2 ;;
	--busybox) busybox=$2; shift 2 ;;
	--feature-gates) feature_gates=$2; shift 2 ;;
	--as-user) as_user=$2; shift 2 ;;
	-h | --help) usage; exit 0 ;;
	*) echo "unknown argument: $1" >&2; usage >&2; exit 2 ;;
	esac
done
case "$parallel" in '' | *[!0-9]* | 0) echo "--parallel: want a positive number, got '$parallel'" >&2; exit 2 ;; esac
case "$images" in oci | host) ;; *) echo "--images: want oci or host, got '$images'" >&2; exit 2 ;; esac

# seconds converts a timeout(1)-style duration (90, 90s, 15m, 1h) to seconds.
seconds() {
	case "$1" in
	*[!0-9smh]* | '' | [smh]*) echo "bad duration '$1'" >&2; return 1 ;;
	*h) echo $((${1%h} * 3600)) ;;
	*m) echo $((${1%m} * 60)) ;;
	*s) echo "${1%s}" ;;
	*) echo "$1" ;;
	esac
}
timeout_s=$(seconds "$spec_timeout")

log() { printf '%s %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
fmt_duration() { printf '%dm%02ds' $(($1 / 60)) $(($1 % 60)); }
nice_run() { nice -n "$niceness" "$@"; }

started_at=$(date -u '+%Y-%m-%d %H:%M UTC')
t0=$(date +%s)
if [ -z "$results" ]; then
	results="/tmp/jobkeeper-conformance-$(date +%Y%m%d-%H%M%S)"
fi
mkdir -p "$results/specs"
results=$(cd "$results" && pwd)
log "results: $results"

# --- e2e.test -------------------------------------------------------------
# A scratch module requiring k8s.io/kubernetes at go.mod's version, with the
# same replace directives for the k8s.io staging modules as jobkeeper's go.mod
# (upstream's own go.mod points them at ./staging, which a module cannot use).
k8s_version=$(cd "$root" && go list -m -f '{{.Version}}' k8s.io/kubernetes)
build_dir="$cache/k8s-$k8s_version"
e2e="$build_dir/e2e.test"
mkdir -p "$build_dir/module"

k8s_gomod=$(cd "$root" && go mod download -json "k8s.io/kubernetes@$k8s_version" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",\{0,1\}$/\1/p')
[ -f "$k8s_gomod" ] || { echo "cannot find the go.mod of k8s.io/kubernetes@$k8s_version" >&2; exit 1; }
want_gomod=$(
	echo "module jobkeeper.dev/conformance/e2ebuild"
	echo
	grep -E '^go [0-9]' "$k8s_gomod"
	grep -E '^godebug ' "$k8s_gomod" || true
	echo
	echo "require k8s.io/kubernetes $k8s_version"
	echo
	echo "replace ("
	sed -n '/^replace (/,/^)/p' "$root/go.mod" | grep -E '^[[:space:]]+k8s\.io/[^ ]+ => k8s\.io/[^ ]+ v[^ ]+$'
	echo ")"
)
stamp="$build_dir/e2e.test.stamp" # the go.mod e2e.test was built from
if [ "$rebuild" = 1 ] || [ ! -x "$e2e" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want_gomod" ]; then
	log "building upstream's e2e.test for Kubernetes $k8s_version in $build_dir (cold: tens of minutes)"
	b0=$(date +%s)
	(
		cd "$build_dir/module"
		printf '%s\n' "$want_gomod" >go.mod
		rm -f go.sum
		cat >build.go <<'EOF'
// Package e2ebuild only exists so that this scratch module can build
// upstream's k8s.io/kubernetes/test/e2e test binary (go test -c).
package e2ebuild

import _ "k8s.io/kubernetes/test/e2e"
EOF
		go mod tidy
		nice_run go test -c -o "$e2e.tmp" k8s.io/kubernetes/test/e2e
	) >"$build_dir/build.log" 2>&1 || {
		tail -30 "$build_dir/build.log" >&2
		echo "building e2e.test failed; log: $build_dir/build.log" >&2
		exit 1
	}
	mv "$e2e.tmp" "$e2e"
	printf '%s\n' "$want_gomod" >"$stamp"
	b1=$(date +%s)
	echo "built $(date -u '+%Y-%m-%d %H:%M UTC') in $(fmt_duration $((b1 - b0)))" >"$build_dir/e2e.test.built"
	build_note="built in $(fmt_duration $((b1 - b0))) (Go build cache state as found)"
	log "e2e.test $build_note"
else
	build_note="cached ($(cat "$build_dir/e2e.test.built" 2>/dev/null || echo "built earlier"))"
	log "e2e.test: $build_note"
fi

# --- agnhost --------------------------------------------------------------
# Upstream's agnhost program, for the agnhost stand-in (only with the oci
# images): built static from k8s.io/kubernetes at the same version, in a
# scratch module of its own (go get adds the modules agnhost needs beyond
# the e2e tests', e.g. its SCTP library), cached beside e2e.test.
agnhost="$build_dir/agnhost"
agnhost_stamp="$build_dir/agnhost.stamp"
if [ "$images" = oci ] && { [ "$rebuild" = 1 ] || [ ! -x "$agnhost" ] || [ "$(cat "$agnhost_stamp" 2>/dev/null)" != "$want_gomod" ]; }; then
	log "building upstream's agnhost for Kubernetes $k8s_version in $build_dir (cold: minutes)"
	b0=$(date +%s)
	mkdir -p "$build_dir/agnhost-module"
	(
		cd "$build_dir/agnhost-module"
		printf '%s\n' "$want_gomod" | sed 's|^module .*|module jobkeeper.dev/conformance/agnhostbuild|' >go.mod
		rm -f go.sum
		go get "k8s.io/kubernetes/test/images/agnhost@$k8s_version"
		CGO_ENABLED=0 nice_run go build -trimpath -ldflags='-s -w' -o "$agnhost.tmp" k8s.io/kubernetes/test/images/agnhost
	) >"$build_dir/agnhost-build.log" 2>&1 || {
		tail -30 "$build_dir/agnhost-build.log" >&2
		echo "building agnhost failed; log: $build_dir/agnhost-build.log" >&2
		exit 1
	}
	mv "$agnhost.tmp" "$agnhost"
	printf '%s\n' "$want_gomod" >"$agnhost_stamp"
	log "agnhost built in $(fmt_duration $(($(date +%s) - b0)))"
fi

# --- the images' tools -----------------------------------------------------
# Upstream's agnhost image adds alpine's curl, netcat-openbsd, bind-tools and
# bash, and glibc-dns-testing is Debian with dnsutils; the [sig-network]
# specs run them. The stand-ins copy this machine's (with their libraries),
# installed here from Debian's packages if missing.
if [ "$images" = oci ]; then
	missing=()
	for pkg in curl netcat-openbsd bind9-dnsutils bash dash; do
		dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'ok installed' || missing+=("$pkg")
	done
	if [ ${#missing[@]} -gt 0 ]; then
		sudo=""
		if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi
		log "installing ${missing[*]} (the stand-ins' tools)"
		$sudo apt-get install -y -q "${missing[@]}" >/dev/null ||
			{ $sudo apt-get update -q >/dev/null && $sudo apt-get install -y -q "${missing[@]}" >/dev/null; } || {
			echo "installing ${missing[*]} failed" >&2
			exit 1
		}
	fi
fi

# agnhost porter's TLS certificate and key, which upstream's image holds at
# its root, from the same module.
agnhost_porter="$(cd "$root" && go mod download -json "k8s.io/kubernetes@$k8s_version" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')/test/images/agnhost/porter"

# --- jobkeeper ------------------------------------------------------------
src="$root"
if [ -n "$at" ]; then
	commit=$(git -C "$root" rev-parse --short=12 "$at^{commit}")
	src="$results/src"
	rm -rf "$src"
	mkdir -p "$src"
	git -C "$root" archive "$commit" | tar -x -C "$src"
	commit_note="$commit (clean export of \`$at\`)"
else
	commit=$(git -C "$root" rev-parse --short=12 HEAD)
	changed=$(git -C "$root" status --porcelain -- ':!docs/conformance.md' | wc -l)
	if [ "$changed" -gt 0 ]; then
		commit_note="$commit + the working tree's uncommitted changes ($changed paths)"
	else
		commit_note="$commit"
	fi
fi
log "building jobkeeper at $commit_note"
(cd "$src" && go build -o "$results/jobkeeper" ./cmd/jobkeeper)
(cd "$root" && go build -o "$results/report" ./test/conformance/report)

# load_images builds the stand-ins' tarball and loads it into the image store
# of the data dir $1 with `jobkeeper image load`; it logs each image (name,
# image ID, source) and sets images_note for the report.
load_images() {
	local data=$1 lines ref id platform source
	log "building the image stand-ins (busybox from $busybox)"
	(cd "$root" && go build -o "$results/standins" ./internal/testimages/cmd/standins) || {
		echo "building internal/testimages/cmd/standins failed" >&2
		exit 1
	}
	# standins builds the pause and nnp programs with the go command, from $root.
	lines=$(cd "$root" && "$results/standins" -o "$results/standins.tar" --busybox "$busybox" --agnhost "$agnhost" --agnhost-porter "$agnhost_porter" --host-tools) || {
		echo "building the image stand-ins failed (a static busybox: apt-get install busybox-static, or --busybox PATH)" >&2
		exit 1
	}
	printf '%s\n' "$lines" >"$results/images.txt"
	"$results/jobkeeper" image load --data-dir "$data" "$results/standins.tar" >"$results/image-load.log" 2>&1 || {
		cat "$results/image-load.log" >&2
		echo "jobkeeper image load failed" >&2
		exit 1
	}
	images_note="$images_note; offline stand-ins loaded with \`jobkeeper image load\` (see *Images, offline* below):"
	while IFS=$'\t' read -r ref id platform source; do
		log "loaded image $ref (ID $id, $platform, from: $source)"
		images_note="$images_note \`$ref\` (ID ${id:7:12}, $source),"
	done <<<"$lines"
	images_note=${images_note%,}
	if "$results/jobkeeper" image ls --data-dir "$data" >"$results/image-ls.txt" 2>&1; then
		log "up's image store holds:"
		sed 's/^/    /' "$results/image-ls.txt" >&2
	else
		log "jobkeeper image ls failed (the load succeeded): $(head -1 "$results/image-ls.txt")"
	fi
}

# --- jobkeeper up ---------------------------------------------------------
up_dir=$(mktemp -d /tmp/jobkeeper-conformance-up.XXXXXX)
kubeconfig="$up_dir/kubeconfig"
up_pid=""
cleanup() {
	local rc=$? f
	# Specs still running (the script was interrupted): SIGINT lets ginkgo
	# clean its namespace up; wait for them before stopping up.
	for f in "$results"/specs/*.pid; do
		[ -e "$f" ] || continue
		kill -INT "$(cat "$f")" 2>/dev/null || true
	done
	for _ in $(seq 360); do
		compgen -G "$results/specs/*.pid" >/dev/null || break
		sleep 0.5
	done
	if [ -n "$up_pid" ] && kill -0 "$up_pid" 2>/dev/null; then
		log "stopping jobkeeper up (pid $up_pid)"
		kill -TERM "$up_pid" 2>/dev/null || true
		for _ in $(seq 60); do
			kill -0 "$up_pid" 2>/dev/null || break
			sleep 0.5
		done
		kill -KILL "$up_pid" 2>/dev/null || true
		wait "$up_pid" 2>/dev/null || true
	fi
	# up's logs are worth keeping beside the specs'; its data is not.
	if [ -d "$up_dir/data/logs" ]; then
		cp -r "$up_dir/data/logs" "$results/up-logs" 2>/dev/null || true
	fi
	# Pod files may be left read-only by a container's sandbox.
	chmod -R u+w "$up_dir" 2>/dev/null || true
	rm -rf "$up_dir" 2>/dev/null || log "could not remove $up_dir"
	log "results: $results"
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# --- the images -----------------------------------------------------------
# No registry is reachable here. The specs' images (busybox, pause,
# nonewprivs, nonroot, agnhost and glibc-dns-testing, under the names v1.36.3's
# test/utils/image/manifest.go gives them) are stand-ins built offline by
# internal/testimages (busybox from Debian's busybox-static, pause and nnp
# programs of our own, upstream's agnhost built above; see
# docs/conformance.md, "Images, offline"), written into a docker-save
# tarball and loaded into the store of up's data dir before up starts. A spec asking for any other image fails to
# pull it, as on a cluster without that image.
images_note="\`--images=$images\`"
if [ "$images" = oci ]; then
	load_images "$up_dir/data"
fi

# As another user (--as-user): up, its data and its binary are that user's, and it runs the rootless node.
as=()
up_bin="$results/jobkeeper"
user_flags=()
if [ -n "$as_user" ]; then
	[ "$(id -u)" = 0 ] || { echo "--as-user: run this script as root" >&2; exit 2; }
	uid=$(id -u "$as_user") && gid=$(id -g "$as_user") || { echo "--as-user: no user $as_user" >&2; exit 2; }
	cp "$results/jobkeeper" "$up_dir/jobkeeper"
	mkdir -p "$up_dir/data"
	chown -R "$uid:$gid" "$up_dir"
	chmod 0755 "$up_dir"
	up_bin="$up_dir/jobkeeper"
	as=(setpriv "--reuid=$uid" "--regid=$gid" --clear-groups env "HOME=$up_dir")
	user_flags=(--network=pod)
fi
log "starting jobkeeper up (data dir $up_dir/data, --images=$images${feature_gates:+, --feature-gates=$feature_gates}${as_user:+, as $as_user with --network=pod})"
# Not through a function: up_pid must be jobkeeper's own pid (setpriv and env exec it).
nice -n "$niceness" "${as[@]}" "$up_bin" up --data-dir "$up_dir/data" --port 0 --kubeconfig-out "$kubeconfig" \
	"--images=$images" ${feature_gates:+"--feature-gates=$feature_gates"} "${user_flags[@]}" >"$results/up.out" 2>&1 &
up_pid=$!
for _ in $(seq 240); do
	grep -q '^jobkeeper is up in' "$results/up.out" && break
	kill -0 "$up_pid" 2>/dev/null || { cat "$results/up.out" >&2; echo "jobkeeper up exited" >&2; exit 1; }
	sleep 0.5
done
grep -q '^jobkeeper is up in' "$results/up.out" || { cat "$results/up.out" >&2; echo "jobkeeper up not ready after 120s" >&2; exit 1; }
log "$(grep '^jobkeeper is up in' "$results/up.out")"

e2e_flags=(--provider=skeleton "--kubeconfig=$kubeconfig" --ginkgo.no-color)

# --- the specs ------------------------------------------------------------
"$e2e" "${e2e_flags[@]}" --ginkgo.dry-run "--ginkgo.focus=$focus" \
	"--ginkgo.json-report=$results/list.json" >"$results/list.log" 2>&1 || {
	tail -20 "$results/list.log" >&2
	echo "listing the specs failed" >&2
	exit 1
}
"$results/report" list "$results/list.json" >"$results/specs.tsv"
total=$(wc -l <"$results/specs.tsv")
log "$total specs; $parallel at a time, each bounded by $spec_timeout"
r0=$(date +%s)


run_spec() { # id regex name
	local id=$1 re=$2 name=$3 s0 rc pid i
	s0=$(date +%s)
	log "start $id $name"
	# e2e.test gets its own session (setsid), so a Ctrl-C at the terminal does
	# not reach it: it gets exactly one SIGINT, from the watchdog below or
	# from cleanup, runs its cleanup (namespace deletion) and writes its
	# report. (timeout(1) signals the child and then its whole process group,
	# and a second SIGINT makes ginkgo skip the cleanup.)
	nice -n "$niceness" setsid "$e2e" "${e2e_flags[@]}" \
		"--ginkgo.focus=$re" --ginkgo.v "--ginkgo.json-report=$results/specs/$id.json" \
		>"$results/specs/$id.log" 2>&1 </dev/null &
	pid=$!
	echo "$pid" >"$results/specs/$id.pid"
	(
		for ((i = 0; i < timeout_s; i++)); do
			sleep 1
			kill -0 "$pid" 2>/dev/null || exit 0
		done
		touch "$results/specs/$id.timedout"
		kill -INT "$pid" 2>/dev/null
		for ((i = 0; i < 120; i++)); do
			sleep 1
			kill -0 "$pid" 2>/dev/null || exit 0
		done
		kill -KILL "$pid" 2>/dev/null
	) &
	rc=0
	wait "$pid" || rc=$?
	wait $! 2>/dev/null || true
	# 124 is what timeout(1) would have answered; the report reads it.
	if [ -e "$results/specs/$id.timedout" ]; then rc=124; fi
	echo "$rc $s0 $(date +%s)" >"$results/specs/$id.status"
	rm -f "$results/specs/$id.pid"
	log "done  $id (exit $rc, $(($(date +%s) - s0))s)"
}

# A plain `wait` would also wait for up: count the specs' own pids instead.
spec_pids=()
running() {
	local p n=0
	for p in "${spec_pids[@]}"; do
		if kill -0 "$p" 2>/dev/null; then n=$((n + 1)); fi
	done
	echo "$n"
}
serial=()
while IFS=$'\t' read -r id is_serial re name; do
	if [ "$is_serial" = 1 ]; then
		serial+=("$id")
		continue
	fi
	while [ "$(running)" -ge "$parallel" ]; do sleep 1; done
	run_spec "$id" "$re" "$name" &
	spec_pids+=($!)
done <"$results/specs.tsv"
for p in "${spec_pids[@]}"; do wait "$p" || true; done
for id in "${serial[@]}"; do
	IFS=$'\t' read -r _ _ re name < <(grep "^$id"$'\t' "$results/specs.tsv")
	run_spec "$id" "$re" "$name"
done

# --- report ---------------------------------------------------------------
t1=$(date +%s)
took="$(fmt_duration $((t1 - r0))) for the specs, $(fmt_duration $((t1 - t0))) for the whole script"
table_args=(
	-list "$results/list.json" -results "$results/specs"
	-command "$command_line" -kubernetes "$k8s_version" -commit "$commit_note"
	-started "$started_at" -took "$took" -build "$build_note"
	-timeout "$spec_timeout" -parallel "$parallel" -images "$images_note"
)
"$results/report" table "${table_args[@]}" -doc "$results/conformance.md"
if [ -n "$doc" ]; then
	"$results/report" table "${table_args[@]}" -doc "$doc" >/dev/null
	log "wrote $doc"
fi
