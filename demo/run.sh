#!/bin/sh
# The demo behind `sudo make demo`: a pod of two apps, from the demo ACI
# the Makefile builds, run by pod1's launcher with pod1's stage1, and then
# what the host sees of it. Everything lives in a throwaway data directory.
set -u
cd "$(dirname "$0")/.."
if [ "$(id -u)" != 0 ]; then
	echo "the demo starts a real pod and needs root: sudo make demo" >&2
	exit 1
fi
DATA=$(mktemp -d /tmp/pod1-demo.XXXXXX)
cleanup() {
	# The pod's overlays stay mounted and its emptied cgroups stay, as
	# rkt run leaves them until rkt gc: collect it (its stage1's gc entry
	# point removes the cgroups), unmount whatever is left, deepest
	# first, then drop the data dir.
	bin/pod1 gc --dir="$DATA" --grace-period=0s >/dev/null 2>&1
	awk -v d="$DATA" '$5 ~ "^"d {print length($5), $5}' /proc/self/mountinfo |
		sort -rn | cut -d' ' -f2- | while read -r m; do umount "$m"; done
	rm -rf "$DATA"
}
trap cleanup EXIT

echo "== pod1 run: two apps from build/demo-hello.aci, stage1 build/stage1.aci"
echo "   greeter sleeps 200ms and exits 0; worker sleeps 500ms and exits 3"
echo "   each line reaches the console as <app>[<pid>]: <line>, the pid the app"
echo "   sees itself as (rkt's console format; pod1/console-format=raw: as written)"
echo
bin/pod1 run --dir="$DATA" --uuid-file-save="$DATA/uuid" --net=none \
	build/demo-hello.aci --name=greeter -- 200ms \
	--- build/demo-hello.aci --name=worker -- 500ms 3
rc=$?
echo
if [ "$rc" != 3 ]; then
	echo "== the pod exited with $rc, not 3: the demo failed" >&2
	exit 1
fi
echo "== the pod exited with $rc: rkt's rule, the first failing app's code"
UUID=$(cat "$DATA/uuid")
POD="$DATA/pods/run/$UUID"
echo
echo "== what the host sees in $POD"
if flock -n -s "$POD" true; then
	echo "lock:    free, so the pod is exited (every pod process gone, every status final)"
else
	echo "lock:    held, so the pod is running"
fi
echo "pid:     $(cat "$POD/pid")  (the pod's PID 1, as the host sees it)"
for s in "$POD"/overlay/*/upper/rkt/status/*; do
	case "$s" in *.json) continue ;; esac
	echo "status:  $(basename "$s") exited $(cat "$s")   (rkt/status/$(basename "$s"), rkt's format)"
done
echo
echo "== pod1 status $UUID"
bin/pod1 --dir="$DATA" status "$UUID"
echo
echo "== pod1 list"
bin/pod1 --dir="$DATA" list
