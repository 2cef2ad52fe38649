#!/usr/bin/env bash
# rkt-conformance: run rkt v1.30.0's own functional test suite (rkt's tests/
# directory, "coreos" flavor) with a given stage1 image as rkt's default stage1.
#
# usage: run.sh STAGE1_ACI [build | test [REGEX] | all [REGEX]]     (as root)
#   build        build stage0, the test binary and the helpers; pack the images
#   test [REGEX] run the tests whose name matches REGEX (default: all 152)
#   all [REGEX]  build, then test (the default)
#
# Everything comes from the Go module proxy: no git, no GitHub, no rkt checkout.
# rkt itself is fetched with `go mod download github.com/rkt/rkt@v1.30.0` (a
# glide project: its module zip has no go.mod and no vendor/), copied to
# WORK/src and given go.mod/go.sum from go.mod.in/go.sum.in beside this script
# (each dependency at the canonical version of its glide.lock commit; see the
# comments there and README.md). This script holds build and run steps only.
#
# Steps, as rkt's tests/functional.mk and tests/stub-stage1/stub-stage1.mk do
# them: static helpers (inspect, echo-socket-activated, cniproxy, ace, the stub
# stage1's run/enter/gc) and actool; the helper images (rkt-inspect, rkt-empty,
# ace-validator main/sidekick, rkt-stub-stage1); stage0 built as configure
# builds it for --with-stage1-default-flavor=coreos; the stage1 under test
# renamed coreos.com/rkt/stage1-coreos:1.30.0 and put where that stage0 looks
# for its default stage1 (stage1-coreos.aci next to rkt); the test binary
# (go test -c -tags coreos ./tests). Each Test* then runs in its own process,
# with a time limit, in a cgroup of its own so that what it leaves behind can
# be killed, gc'd and unmounted before the next.
#
# Knobs (environment): WORK, PER_TEST_TIMEOUT, WATCH_PODS, EXCLUDE, EMPTY_OK, GO,
# GOPROXY, GOSUMDB, GOMODCACHE, GOCACHE, CGO_ENABLED. See README.md.
set -euo pipefail

usage() {
	echo "usage: $0 STAGE1_ACI [build | test [REGEX] | all [REGEX]]" >&2
	exit 2
}
die() { echo "run.sh: $*" >&2; exit 1; }
log() { printf '[run.sh %s] %s\n' "$(date +%T)" "$*" >&2; }

HERE=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")" && pwd)

[ $# -ge 1 ] && [ $# -le 3 ] || usage
STAGE1_ACI=$1
CMD=${2:-all}
FILTER=${3:-.}
case $CMD in
build) [ $# -le 2 ] || usage ;;
test | all) ;;
*) usage ;;
esac
case $STAGE1_ACI in /*) ;; *) STAGE1_ACI=$PWD/$STAGE1_ACI ;; esac
[ -f "$STAGE1_ACI" ] || die "stage1 image $STAGE1_ACI: no such file"
[ "$(id -u)" = 0 ] || die "run as root (rkt's functional tests need root)"

WORK=${WORK:-/var/tmp/rkt-conformance}
PER_TEST_TIMEOUT=${PER_TEST_TIMEOUT:-420}
WATCH_PODS=${WATCH_PODS:-1}
EXCLUDE=${EXCLUDE:-}
EMPTY_OK=${EMPTY_OK:-0}
case $WORK in
/*) ;;
*) die "WORK must be an absolute path" ;;
esac
case $WORK in *[[:space:]]*) die "WORK must not contain white space" ;; esac
case $PER_TEST_TIMEOUT in '' | *[!0-9]*) die "PER_TEST_TIMEOUT must be a number of seconds" ;; esac
[ "$PER_TEST_TIMEOUT" -ge 30 ] || die "PER_TEST_TIMEOUT must be at least 30"
for f in go.mod.in go.sum.in stage1-manifest.go.in; do
	[ -f "$HERE/$f" ] || die "missing $HERE/$f"
done

RKT_MOD=github.com/rkt/rkt
RKT_VER=v1.30.0
RKT_SUM='h1:ZI5RQtSibfjicSttV/HLiHuWreYClEJA2Or5XKAdJb0='
MATHUTIL_VER=v0.0.0-20150118111314-250d0b9d3304

SRC=$WORK/src            # the rkt module with our go.mod
B=$WORK/build            # helper binaries, the test binary
IMG=$WORK/images         # helper images
BIN=$WORK/bin            # rkt, stage1-coreos.aci and rkt-stub-stage1.aci next to it
S1DIR=$WORK/stage1-images # stage0's built-in stage1 images directory

# --- Go --------------------------------------------------------------------
# PATH may lack Go's directory (e.g. /usr/local/go/bin under sudo or cron).
if [ -z "${GO:-}" ]; then
	GO=$(command -v go || true)
	for g in /usr/local/go/bin/go /usr/lib/go/bin/go; do
		[ -n "$GO" ] && break
		[ -x "$g" ] && GO=$g
	done
fi
[ -n "$GO" ] && [ -x "$GO" ] || die "go not found (not in PATH nor /usr/local/go/bin); set GO=/path/to/go"
export PATH="$(dirname "$GO"):$PATH"
GOVERSION=$("$GO" env GOVERSION)
case $GOVERSION in
go1.2[3-9]* | go1.[3-9][0-9]* | go[2-9]*) ;;
*) die "need Go >= 1.23 (go.mod uses a godebug line), have $GOVERSION" ;;
esac
# Module mode, the local toolchain, no workspace, our own flags; private
# caches under WORK unless the caller chose others.
export GO111MODULE=on GOWORK=off GOTOOLCHAIN=local GOFLAGS="-modcacherw -buildvcs=false"
export GOMODCACHE=${GOMODCACHE:-$WORK/gomodcache} GOCACHE=${GOCACHE:-$WORK/gocache}
UPSTREAM_GOPROXY=$("$GO" env GOPROXY)

mkdir -p "$WORK"
chmod 0755 "$WORK"
exec {LOCKFD}>"$WORK/.lock"
flock -n "$LOCKFD" || die "another run.sh is using $WORK"

# A file:// proxy in front of the configured one, holding the one file the
# proxy refuses: github.com/cznic/mathutil@$MATHUTIL_VER's .mod (403). The
# commit has no go.mod, so that file is the one-line synthesized
# "module github.com/cznic/mathutil"; go.sum.in pins its hash, which equals
# the checksum database's record (h1:e6NPNENfs9mPDVNRekM7lKScauxd5kXTr1Mfyig6TDM=).
OVERLAY=$WORK/goproxy-overlay
mkdir -p "$OVERLAY/github.com/cznic/mathutil/@v"
printf 'module github.com/cznic/mathutil\n' >"$OVERLAY/github.com/cznic/mathutil/@v/$MATHUTIL_VER.mod"
[ -n "$UPSTREAM_GOPROXY" ] && [ "$UPSTREAM_GOPROXY" != off ] || die "GOPROXY is empty or off: the Go module proxy is needed"
export GOPROXY="file://$OVERLAY,$UPSTREAM_GOPROXY"

# sed that rkt's makelib/misc.mk generate-manifest-file does
genmanifest() {
	sed -e 's/@ACI_OS@/linux/' -e 's/@ACI_ARCH@/amd64/' \
		-e 's/@GOOS@/linux/' -e 's/@GOARCH@/amd64/' "$1" >"$2"
}

json_field() { # json_field NAME < go mod download -json output (first match)
	sed -n "/^[[:space:]]*\"$1\": \"/{s/^[[:space:]]*\"$1\": \"\(.*\)\",\{0,1\}\$/\1/p;q}"
}

fetch_rkt() {
	log "fetching $RKT_MOD@$RKT_VER (GOPROXY=$UPSTREAM_GOPROXY)"
	local dl dir sum err
	dl=$(cd "$WORK" && "$GO" mod download -json "$RKT_MOD@$RKT_VER") || true
	err=$(json_field Error <<<"$dl")
	[ -z "$err" ] || die "go mod download $RKT_MOD@$RKT_VER: $err"
	dir=$(json_field Dir <<<"$dl")
	sum=$(json_field Sum <<<"$dl")
	[ "$sum" = "$RKT_SUM" ] || die "$RKT_MOD@$RKT_VER has sum '$sum', want $RKT_SUM"
	[ -d "$dir/tests" ] || die "unexpected module directory '$dir'"
	rm -rf "$SRC"
	cp -R "$dir" "$SRC"
	chmod -R u+w "$SRC"
	cp "$HERE/go.mod.in" "$SRC/go.mod"
	cp "$HERE/go.sum.in" "$SRC/go.sum"
	log "downloading the dependencies listed in go.mod.in"
	(cd "$SRC" && "$GO" mod download) ||
		die "go mod download failed (see above); is the Go module proxy ($UPSTREAM_GOPROXY) reachable?"
}

gobuild() { # gobuild OUT PKG... [-- go build flags]
	(cd "$SRC" && "$GO" build -mod=readonly "$@")
}

build_binaries() {
	mkdir -p "$B/ss1" "$BIN" "$S1DIR"
	log "building actool, and the static helpers (Go $GOVERSION)"
	gobuild -o "$B/actool" github.com/appc/spec/actool
	CGO_ENABLED=0 gobuild -o "$B/" ./tests/inspect ./tests/echo-socket-activated \
		./tests/cniproxy github.com/appc/spec/ace
	CGO_ENABLED=0 gobuild -o "$B/ss1/" ./tests/stub-stage1/run ./tests/stub-stage1/enter \
		./tests/stub-stage1/gc

	log "building stage0 (default stage1: coreos.com/rkt/stage1-coreos 1.30.0, $BIN/stage1-coreos.aci)"
	# As rkt's configure does for --with-stage1-default-flavor=coreos: name
	# coreos.com/rkt/stage1-coreos, version = rkt's, no location, so the image
	# is looked up in the store by name and else loaded from stage1-coreos.aci
	# next to the rkt binary.
	gobuild -o "$BIN/rkt" -tags selinux -ldflags "\
-X github.com/rkt/rkt/version.Version=1.30.0 \
-X main.buildDefaultStage1Name=coreos.com/rkt/stage1-coreos \
-X main.buildDefaultStage1Version=1.30.0 \
-X main.buildDefaultStage1ImageInRktDir=stage1-coreos.aci \
-X main.buildDefaultStage1ImagesDir=$S1DIR" ./rkt
	local v
	v=$("$BIN/rkt" version) # (no "| head": rkt would die of SIGPIPE, and pipefail with it)
	v=${v%%$'\n'*}
	[ "$v" = "rkt Version: 1.30.0" ] || die "unexpected '$BIN/rkt version': $v"

	log "building the functional test binary (-tags coreos)"
	(cd "$SRC" && "$GO" test -mod=readonly -vet=off -c -tags coreos \
		-o "$B/functional-coreos.test" ./tests)

	log "building stage1-manifest (renames the stage1 under test)"
	local d=$WORK/stage1-manifest-src
	rm -rf "$d"
	mkdir -p "$d"
	cp "$HERE/stage1-manifest.go.in" "$d/stage1-manifest.go"
	printf 'module stage1-manifest\n\ngo 1.21\n' >"$d/go.mod"
	(cd "$d" && "$GO" build -o "$B/stage1-manifest" .)
}

pack_images() {
	local A=$B/actool d r k x
	log "packing rkt-inspect (tests/functional.mk)"
	d=$IMG/inspect
	rm -rf "$d"
	r=$d/rootfs
	mkdir -p "$r/dir1" "$r/dir2" "$r/bin" "$r/etc"
	chmod 0755 "$r"
	genmanifest "$SRC/tests/image/manifest" "$d/manifest"
	install -m 0755 "$B/inspect" "$r/inspect"
	install -m 0755 "$B/echo-socket-activated" "$r/echo-socket-activated"
	echo -n dir1 >"$r/dir1/file"
	ln -sf /dir2 "$r/dir1/link_abs_dir2"
	ln -sf /../dir2 "$r/dir1/link_abs_dotdot_dir2"
	ln -sf ../dir2 "$r/dir1/link_rel_dir2"
	ln -sf / "$r/dir1/link_abs_root"
	ln -sf /notexists "$r/dir1/link_abs_notexists"
	echo -n dir2 >"$r/dir2/file"
	echo -n group1:x:100:user1 >"$r/etc/group"
	echo -n user1:x:1000:100::/: >"$r/etc/passwd"
	ln -sf /inspect "$r/inspect-link"
	ln -sf /inspect "$r/bin/inspect-link-bin"
	"$A" build --overwrite --owner-root "$d" "$IMG/rkt-inspect.aci"

	log "packing rkt-empty, rkt-ace-validator-main/-sidekick, rkt-stub-stage1"
	d=$IMG/empty
	rm -rf "$d"
	mkdir -p "$d/rootfs"
	genmanifest "$SRC/tests/empty-image/manifest" "$d/manifest"
	"$A" build --overwrite "$d" "$IMG/rkt-empty.aci"
	local acedir
	acedir=$(cd "$SRC" && "$GO" list -mod=readonly -f '{{.Dir}}' github.com/appc/spec/ace)
	for k in main sidekick; do
		d=$IMG/ace-$k
		rm -rf "$d"
		mkdir -p "$d/rootfs/opt/acvalidator"
		genmanifest "$acedir/image_manifest_$k.json.in" "$d/manifest"
		install -m 0755 "$B/ace" "$d/rootfs/ace-validator"
		"$A" build --overwrite "$d" "$IMG/rkt-ace-validator-$k.aci"
	done
	d=$IMG/ss1
	rm -rf "$d"
	mkdir -p "$d/rootfs/opt/stage1" "$d/rootfs/rkt/env" "$d/rootfs/rkt/status"
	genmanifest "$SRC/tests/stub-stage1/manifest" "$d/manifest"
	for x in run enter gc; do install -m 0755 "$B/ss1/$x" "$d/rootfs/$x"; done
	"$A" build --overwrite "$d" "$IMG/rkt-stub-stage1.aci"
	# functional.mk puts rkt and the stub stage1 in one directory;
	# TestStage1LoadingFromConfigFallback relies on that
	cp "$IMG/rkt-stub-stage1.aci" "$BIN/rkt-stub-stage1.aci"

	# the tests read these from their working directory
	rm -rf "$WORK/cwd"
	mkdir -p "$WORK/cwd"
	cp "$SRC"/tests/*.gpg "$SRC"/tests/*.conf "$WORK/cwd/"
}

# The stage1 under test, renamed coreos.com/rkt/stage1-coreos:1.30.0 (the
# name and version stage0 was built to look for; otherwise tests such as
# TestImageRunRm* do not find coreos.com/rkt/stage1 in `rkt image list`).
# Only the manifest's name and "version" label change. Run for build and test,
# so that `test` always uses the STAGE1_ACI it is given.
install_stage1() {
	[ -x "$B/stage1-manifest" ] && [ -x "$B/actool" ] || die "build first: $0 $STAGE1_ACI build"
	log "installing $STAGE1_ACI as coreos.com/rkt/stage1-coreos:1.30.0"
	local d=$WORK/stage1 entry
	rm -rf "$d"
	mkdir -p "$d"
	tar --numeric-owner -xf "$STAGE1_ACI" -C "$d"
	[ -f "$d/manifest" ] && [ -d "$d/rootfs" ] || die "$STAGE1_ACI is not an ACI (no manifest, rootfs/)"
	entry=$("$B/stage1-manifest" "$d/manifest" coreos.com/rkt/stage1-coreos 1.30.0)
	"$B/actool" build --overwrite "$d" "$BIN/stage1-coreos.aci"
	cp "$BIN/stage1-coreos.aci" "$S1DIR/stage1-coreos.aci"
	printf '%s\n' "$entry" >"$BIN/stage1-run-entrypoint"
	sha256sum "$STAGE1_ACI" | cut -d' ' -f1 >"$BIN/stage1-source.sha256"
}

build() {
	local t0=$SECONDS
	fetch_rkt
	build_binaries
	pack_images
	log "build done in $((SECONDS - t0))s"
}

# --- running ------------------------------------------------------------------

TCG=  # the per-test cgroup (v1 freezer), if there is one
FCG=

cleanup_leftovers() { # kill what a test left, gc its pods, unmount, remove
	local i p
	if [ -n "$TCG" ] && [ -d "$TCG" ]; then
		for i in 1 2 3 4 5 6 7 8 9 10; do
			p=$(cat "$TCG/cgroup.procs" 2>/dev/null || true)
			[ -z "$p" ] && break
			kill -9 $p 2>/dev/null || true
			sleep 0.5
		done
		rmdir "$TCG" 2>/dev/null || true
	fi
	# pods a killed test left: let rkt (and so the stage1's gc) clean up
	local dd u pcg uuids=()
	for dd in "$WORK"/tmp/datadir-*; do
		[ -d "$dd/pods" ] || continue
		for u in "$dd"/pods/*/*; do [ -d "$u" ] && uuids+=("$(basename "$u")"); done
		timeout 60 "$BIN/rkt" --dir="$dd" gc --grace-period=0s >/dev/null 2>&1 {LOCKFD}>&- || true
	done
	# a test that panicked half-way through removing its data directory
	# leaves pods no gc can visit: remove their (empty) cgroups, i.e. those
	# whose name holds the pod's UUID (rmdir removes empty cgroups only)
	for u in "${uuids[@]}"; do
		find /sys/fs/cgroup -maxdepth 6 -type d -name "*$u*" -prune -print 2>/dev/null
	done | while read -r pcg; do
		find "$pcg" -depth -type d -exec rmdir {} \; 2>/dev/null || true
	done
	# mounts rkt left under our scratch directories, deepest first
	local m
	for m in $(awk -v w="$WORK/tmp" -v f="$WORK/functional-tmp" \
		'index($5, w "/") == 1 || index($5, f "/") == 1 { print $5 }' /proc/self/mountinfo | sort -r); do
		umount -l "$m" 2>/dev/null || true
	done
	rm -rf --one-file-system "${WORK:?}/tmp"/* "${WORK:?}/functional-tmp"/* 2>/dev/null || true
	rm -f /run/rkt/metadata-svc.sock 2>/dev/null || true
	cleanup_nat_chains
}

# The per-pod NAT chains of CNI's default network (CNI-<hex>, jumped to from
# POSTROUTING) that a pod whose network was never torn down leaves on the
# host (rkt's TestExport and TestGCAfterUnmount do, with any stage1): every
# such chain made since runtests began is removed, with its jumps.
PRE_NAT_CHAINS= NAT_SNAPSHOT=0
nat_chains() {
	command -v iptables >/dev/null 2>&1 || return 0
	iptables -w -t nat -S 2>/dev/null | awk '$1 == "-N" && $2 ~ /^CNI-[0-9a-f]+$/ { print $2 }'
}
cleanup_nat_chains() {
	local c rule
	[ "$NAT_SNAPSHOT" = 1 ] || return 0
	for c in $(nat_chains); do
		grep -qxF "$c" <<<"$PRE_NAT_CHAINS" && continue
		iptables -w -t nat -S POSTROUTING 2>/dev/null | awk -v c="$c" '$1 == "-A" && $NF == c' |
			while read -r rule; do
				eval "iptables -w -t nat ${rule/#-A/-D}" 2>/dev/null || true
			done
		iptables -w -t nat -F "$c" 2>/dev/null || true
		iptables -w -t nat -X "$c" 2>/dev/null || true
		[ -n "${R:-}" ] && echo "removed the NAT chain $c a test left" >>"$R/host-side-effects.txt"
	done
}

# Records every stage1 run-entrypoint process (the pod's stage1, exec'd by
# stage0) that appears in the test's cgroup, one line per pod, so that tests
# that started pods can be told from tests that exercise only stage0 (the
# stage1-loading tests' pods are rkt's stub stage1, not the image under
# test). Polls every 10ms with shell builtins only; a pod refused within
# 10ms can be missed.
watch_stage1() { # CGROUP_DIR OUTFILE ENTRYPOINT
	local seen=" " pods=" " p a0 pids fifo fd
	fifo=$(mktemp -u "$WORK/.watch.XXXXXX")
	mkfifo "$fifo"
	exec {fd}<>"$fifo"
	rm -f "$fifo"
	while [ -d "$1" ]; do
		{ mapfile -t pids <"$1/cgroup.procs"; } 2>/dev/null || true
		for p in "${pids[@]}"; do
			[[ "$seen" == *" $p "* ]] && continue
			a0=
			{ IFS= read -r -d '' a0 <"/proc/$p/cmdline"; } 2>/dev/null || true
			[[ "$a0" == */stage1/rootfs"$3" ]] || continue # (stage0 may exec it later)
			seen+="$p "
			if [[ "$pods" != *" $a0 "* ]]; then # one line per pod, not per process
				pods+="$a0 "
				echo "$a0" >>"$2"
			fi
		done
		read -r -t 0.01 -u "$fd" _ || true
	done
}

WPID=
on_exit() {
	if [ -n "$WPID" ]; then kill "$WPID" 2>/dev/null || true; fi
	cleanup_leftovers
	if [ -n "$FCG" ]; then rmdir "$FCG" 2>/dev/null || true; fi
}

runtests() {
	local bin=$B/functional-coreos.test
	[ -x "$bin" ] && [ -x "$BIN/rkt" ] || die "build first: $0 $STAGE1_ACI build"
	local entry R tests
	mapfile -t tests < <(cd "$WORK/cwd" && "$bin" -test.list '^Test' | grep -E -- "$FILTER" |
		{ if [ -n "$EXCLUDE" ]; then grep -v -E -- "$EXCLUDE"; else cat; fi; } || true)
	if [ ${#tests[@]} = 0 ]; then
		# A caller that splits one regex over two runs (TestNet* in
		# netns.sh) may find one half empty; that is not a failure.
		[ "$EMPTY_OK" = 1 ] || die "no test matches '$FILTER'"
		log "no test matches '$FILTER'${EXCLUDE:+ outside '$EXCLUDE'}: nothing to run"
		return 0
	fi
	install_stage1
	entry=$(cat "$BIN/stage1-run-entrypoint")
	R=$WORK/results/$(date +%Y%m%d-%H%M%S)
	[ -e "$R" ] && R=$R-$$
	mkdir -p "$R/logs" "$WORK/tmp" "$WORK/functional-tmp"
	chmod 1777 "$WORK/tmp"
	chmod 0755 "$WORK/functional-tmp"
	# rkt's CI setup (tests/README.md): a "rkt" group
	getent group rkt >/dev/null || groupadd --system rkt
	# each test runs in a cgroup of its own in the v1 freezer hierarchy (a
	# controller stage1s do not normally use), so what it leaves can be killed
	if awk '$5 == "/sys/fs/cgroup/freezer" { f = 1 } END { exit !f }' /proc/self/mountinfo; then
		FCG=/sys/fs/cgroup/freezer/rkt-conformance-$$
		mkdir -p "$FCG"
		TCG=$FCG/t
	else
		log "no v1 freezer hierarchy: what a test leaves is not killed, pods are not counted"
	fi
	trap on_exit EXIT
	trap 'exit 130' INT TERM

	export RKT=$BIN/rkt ACTOOL=$B/actool \
		RKT_INSPECT_IMAGE=$IMG/rkt-inspect.aci RKT_EMPTY_IMAGE=$IMG/rkt-empty.aci \
		RKT_ACE_MAIN_IMAGE=$IMG/rkt-ace-validator-main.aci \
		RKT_ACE_SIDEKICK_IMAGE=$IMG/rkt-ace-validator-sidekick.aci \
		RKT_CNI_PROXY=$B/cniproxy FUNCTIONAL_TMP=$WORK/functional-tmp \
		INSPECT_BINARY=$B/inspect STUB_STAGE1=$BIN/rkt-stub-stage1.aci \
		RKT_STAGE1_DEFAULT_FLAVOR=coreos TMPDIR=$WORK/tmp TERM=${TERM:-xterm}
	{
		echo "date: $(date -Is)"
		echo "host: $(uname -n), kernel $(uname -r)"
		echo "stage1 under test: $STAGE1_ACI (sha256 $(cat "$BIN/stage1-source.sha256"))"
		echo "stage1 as installed: $BIN/stage1-coreos.aci (sha256 $(sha256sum "$BIN/stage1-coreos.aci" | cut -d' ' -f1)), run entrypoint $entry"
		echo "rkt: $("$RKT" version | sed -n 1p), built with $GOVERSION, CGO_ENABLED=$(go env CGO_ENABLED)"
		echo "go.mod.in sha256: $(sha256sum "$HERE/go.mod.in" | cut -d' ' -f1)"
		echo "flavor tag: coreos; per-test timeout: ${PER_TEST_TIMEOUT}s; pod watcher: $([ -n "$TCG" ] && [ "$WATCH_PODS" = 1 ] && echo on || echo off)"
	} >"$R/env.txt"

	log "${#tests[@]} tests; results in $R"
	: >"$R/summary.tsv"
	: >"$R/host-side-effects.txt"
	[ -n "$TCG" ] && [ "$WATCH_PODS" = 1 ] && : >"$R/pods.tsv"
	local cgt pre_cgt=()
	for cgt in /sys/fs/cgroup/test /sys/fs/cgroup/memory/test /sys/fs/cgroup/cpu/test; do
		[ -e "$cgt" ] && pre_cgt+=("$cgt")
	done
	local t0=$SECONDS t s rc res start log
	PRE_NAT_CHAINS=$(nat_chains) NAT_SNAPSHOT=1
	for t in "${tests[@]}"; do
		cleanup_leftovers
		log=$R/logs/$t.log
		WPID=
		if [ -n "$TCG" ]; then
			mkdir -p "$TCG"
			if [ "$WATCH_PODS" = 1 ]; then
				: >"$R/logs/$t.stage1-runs"
				watch_stage1 "$TCG" "$R/logs/$t.stage1-runs" "$entry" &
				WPID=$!
			fi
		fi
		start=$SECONDS
		# The lock's fd is closed for the test, so that nothing it leaves holds
		# the lock. It runs in the background because bash runs the INT/TERM
		# trap (which kills the test's cgroup) only once a foreground command
		# ends, but interrupts `wait` at once.
		(exec {LOCKFD}>&- && cd "$WORK/cwd" && exec sh -c '[ -z "$1" ] || echo $$ >"$1/cgroup.procs"; shift; exec "$@"' sh "$TCG" \
			timeout -k 20 "$PER_TEST_TIMEOUT" "$bin" -test.v -test.run "^$t\$" \
			-test.timeout "$((PER_TEST_TIMEOUT - 15))s" </dev/null >"$log" 2>&1) &
		set +e
		wait $!
		rc=$?
		set -e
		s=$((SECONDS - start))
		if [ -n "$WPID" ]; then
			kill "$WPID" 2>/dev/null || true
			wait "$WPID" 2>/dev/null || true
			WPID=
			printf '%s\t%s\n' "$t" "$(wc -l <"$R/logs/$t.stage1-runs")" >>"$R/pods.tsv"
		fi
		if grep -q -- "^--- PASS: $t " "$log"; then res=PASS
		elif grep -q -- "^--- SKIP: $t " "$log"; then res=SKIP
		elif [ $rc = 124 ] || [ $rc = 137 ] || grep -q '^panic: test timed out' "$log"; then res=TIMEOUT
		else
			res=FAIL
			grep -q -- "^--- FAIL: $t " "$log" ||
				echo "run.sh: the test binary exited with status $rc without a '--- FAIL: $t' line" >>"$log"
		fi
		printf '%s\t%s\t%s\n' "$t" "$res" "$s" | tee -a "$R/summary.tsv"
		# inspect --check-cgroups mkdirs "test" in /proc/1/root/sys/fs/cgroup:
		# with a stage1 whose PID 1 sees the host's root, that is the host's
		for cgt in /sys/fs/cgroup/test /sys/fs/cgroup/memory/test /sys/fs/cgroup/cpu/test; do
			if [ -d "$cgt" ] && [[ " ${pre_cgt[*]} " != *" $cgt "* ]]; then
				echo "$t: created $cgt on the host ($(stat -c %y "$cgt")); removed" >>"$R/host-side-effects.txt"
				rmdir "$cgt" 2>/dev/null || true
			fi
		done
	done
	cleanup_leftovers
	local total=$((SECONDS - t0)) n p f k o line
	n=${#tests[@]}
	p=$(awk -F'\t' '$2 == "PASS"' "$R/summary.tsv" | wc -l)
	f=$(awk -F'\t' '$2 == "FAIL"' "$R/summary.tsv" | wc -l)
	k=$(awk -F'\t' '$2 == "SKIP"' "$R/summary.tsv" | wc -l)
	o=$(awk -F'\t' '$2 == "TIMEOUT"' "$R/summary.tsv" | wc -l)
	line="$n tests: $p PASS, $f FAIL, $k SKIP, $o TIMEOUT in ${total}s"
	{
		echo "$line"
		if [ -f "$R/pods.tsv" ]; then
			echo "passes that started at least one pod (with any stage1: the stage1-loading tests' are rkt's stub): $(
				awk -F'\t' 'NR == FNR { if ($2 == "PASS") pass[$1] = 1; next } ($1 in pass) && $2 > 0' \
					"$R/summary.tsv" "$R/pods.tsv" | wc -l)"
		fi
		if [ -s "$R/host-side-effects.txt" ]; then
			echo "host side effects (undone): see host-side-effects.txt"
		fi
	} >"$R/totals.txt"
	log "results: $R"
	echo "rkt-conformance: $line (stage1 $STAGE1_ACI; results $R)"
}

case $CMD in
build)
	build
	install_stage1
	;;
test) runtests ;;
all)
	build
	runtests
	;;
esac
