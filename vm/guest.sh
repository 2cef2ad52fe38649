#!/bin/sh
# vm/guest.sh: PID 1 of the test VM, run by the host's /bin/sh from the
# scratch disk once the initramfs has switched to the host's / (read-only,
# virtiofs). It mounts what a host has, lays out the cgroups as LAYOUT says,
# runs the test binaries vm/run.sh compiled and stores their output and exit
# code on the result disk (/dev/vdb, a tar), then powers off.
#
# Layouts:
#   v2      cgroup2 alone at /sys/fs/cgroup, as systemd lays it out on a
#           cgroup v2-only host: PID 1 in init.scope, the suite in
#           user.slice/user-0.slice/session-1.scope; the root enables every
#           controller, the slices cpu, memory and pids, the scope (not
#           delegated) none.
#   v2root  cgroup2 alone, the suite in the root cgroup, no controller
#           enabled anywhere (a host without systemd).
#   v1      only v1 hierarchies, as systemd's legacy mode mounts them
#           (cpu,cpuacct and net_cls,net_prio joined, name=systemd); the
#           suite in the session scope in name=systemd, cpu,cpuacct, memory
#           and pids, in the root elsewhere.
#   hybrid  v1 as above plus cgroup2 (no controllers) at
#           /sys/fs/cgroup/unified, the suite in the session scope there too.
#   systemd the host's systemd boots as PID 1 (boot_systemd below) and lays
#           out cgroup v2 itself; journald and dbus run; the suite is the
#           unit pod1-vm-suite.service (Delegate=yes, as a CI runner's
#           service), which runs this script again as "guest.sh suite".
#           With SUITE=conformance in the env file, that unit runs rkt's
#           functional suite (tools/rkt-conformance/run.sh test) instead.
S=/run/pod1-vm/scratch
PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export PATH

# The systemd layout's suite unit runs this script again, as "guest.sh
# suite", once systemd has booted; everything else is done by PID 1.
MODE=${1:-pid1}
if [ "$MODE" = pid1 ]; then
	mount -t proc proc /proc
	mount -t sysfs sysfs /sys
	mount -t devtmpfs devtmpfs /dev
	exec </dev/console >/dev/console 2>&1
fi

finish() {
	echo "${1:-125}" >"$S/result/rc"
	(cd "$S/result" && tar -cf /dev/vdb rc log conformance 2>/dev/null || tar -cf /dev/vdb rc log 2>/dev/null || tar -cf /dev/vdb rc)
	sync
	/bin/busybox poweroff -f
	echo o >/proc/sysrq-trigger
	sleep 60
}

. "$S/env"
SUITE=${SUITE:-integration}

run_all() {
	rc=0
	while read -r rel bin; do
		echo "=== package $rel"
		start=$(date +%s)
		(
			# $$ is PID 1's in a subshell: /proc/self, read by a builtin, is
			# the subshell's own.
			read -r self _ </proc/self/stat
			for d in ${into:-}; do echo "$self" >"$d/cgroup.procs" || exit 125; done
			cd "/tmp/pod1-vm/repo/$rel" || exit 125
			exec env -i PATH="$PATH" HOME=/root TMPDIR=/tmp LANG=C.UTF-8 USER=root \
				POD1_TEST_EVENT_DEADLINE="$EVENT_DEADLINE" POD1_TEST_EMULATED="$([ "${ACCEL:-}" = tcg ] && echo 1)" \
				"$S/testbin/$bin" -test.v -test.count=1 -test.timeout="$TIMEOUT" ${RUN:+"-test.run=$RUN"}
		)
		r=$?
		if [ $r = 0 ]; then echo "ok   $rel $(($(date +%s) - start))s"; else echo "FAIL $rel $(($(date +%s) - start))s (exit $r)"; fi
		[ $rc != 0 ] || rc=$r
	done <"$S/testbin/list"
	echo "$rc" >"$S/result/rc.inner"
}

# rkt's functional suite (tools/rkt-conformance/run.sh, built on the host
# by vm/run.sh into CONF_WORK): the tests that match RUN, TestNet* in a
# network namespace of their own as `make conformance` runs them (the VM
# has no network, but the tests still want a link with an address and a
# default route). CONF_WORK is the host's path, seen read-only; the copy
# on the scratch disk is mounted over it so that run.sh can write there.
run_conformance() {
	t=/tmp/pod1-vm/repo/tools/rkt-conformance
	stage1=/tmp/pod1-vm/repo/build/stage1.aci
	mount --bind "$S/conformance-work" "$CONF_WORK" || { echo 125 >"$S/result/rc.inner"; return; }
	# A bind of a shared mount (systemd made $S's shared) joins its peer
	# group: every overlay rkt mounts for a pod under CONF_WORK would also
	# be mounted under $S, where rkt's gc leaves it unless the stage1
	# helps (docs/hosts.md, Shared mounts), and the pod's directory
	# cannot be removed (EBUSY). A peer group of its own, as every mount
	# of a systemd host has: the suite is to see such a host.
	mount --make-private "$CONF_WORK" && mount --make-shared "$CONF_WORK" || { echo 125 >"$S/result/rc.inner"; return; }
	echo "pod1-vm: rkt's functional suite, tests matching '${RUN:-.}', ${CONF_TIMEOUT}s per test"
	rc=0
	env WORK="$CONF_WORK" PER_TEST_TIMEOUT="$CONF_TIMEOUT" EXCLUDE='^TestNet' EMPTY_OK=1 \
		"$t/run.sh" "$stage1" test "${RUN:-.}" || rc=$?
	# EXCLUDE keeps only TestNet* (every other name differs from it
	# within its first seven characters).
	env WORK="$CONF_WORK" PER_TEST_TIMEOUT="$CONF_TIMEOUT" EXCLUDE='^Test([^N]|N[^e]|Ne[^t])' EMPTY_OK=1 \
		"$t/netns.sh" "$t/run.sh" "$stage1" test "${RUN:-.}" || [ $rc != 0 ] || rc=$?
	mkdir -p "$S/result/conformance"
	cp -a "$CONF_WORK"/results/. "$S/result/conformance/" 2>/dev/null
	echo "$rc" >"$S/result/rc.inner"
}

# The systemd layout: the root is writable (an overlay on the host's /,
# vm/init), and the host's systemd, exec'd as PID 1, boots
# pod1-vm.target: sysinit, sockets (journald, dbus) and slices as on any
# systemd host, and the suite's unit; not basic.target, whose timers
# (apt, man-db, fstrim: Persistent=, so due at once on a fresh /var) would
# run beside the suite, nor multi-user.target's services.
boot_systemd() {
	u=/etc/systemd/system
	cat >$u/pod1-vm.target <<-EOF
		[Unit]
		Description=pod1 VM: the integration suite under systemd
		Requires=sysinit.target sockets.target slices.target pod1-vm-suite.service
		After=sysinit.target sockets.target slices.target
		AllowIsolate=yes
	EOF
	cat >$u/pod1-vm-suite.service <<-EOF
		[Unit]
		Description=pod1 VM: the suite (vm/guest.sh suite)
		Wants=dbus.socket systemd-journald.service
		After=dbus.socket systemd-journald.service systemd-tmpfiles-setup.service

		[Service]
		Type=oneshot
		ExecStart=/bin/sh $S/guest.sh suite
		StandardInput=null
		StandardOutput=journal+console
		StandardError=inherit
		TimeoutStartSec=infinity
		Delegate=yes
	EOF
	echo pod1-vm >/etc/hostname
	# systemd-tmpfiles empties /tmp at boot (D in tmp.conf): the checkout
	# and test binaries staged there must outlive it.
	mkdir -p /etc/tmpfiles.d
	echo 'd /tmp 1777 root root -' >/etc/tmpfiles.d/tmp.conf
	echo "pod1-vm: booting $(/lib/systemd/systemd --version | sed -n 1p)"
	exec /lib/systemd/systemd --system --unit=pod1-vm.target --show-status=error
}

if [ "$MODE" = suite ]; then
	# systemd's unit: the console is the unit's stdout (journal+console).
	echo "pod1-vm: kernel $(uname -r), systemd as PID 1 ($(systemctl --version | sed -n 1p)), $(nproc) cpus"
	echo "pod1-vm: the suite runs in $(cat /proc/self/cgroup)"
	echo "pod1-vm: cgroup mounts:"
	grep cgroup /proc/self/mounts
	case $SUITE in
	conformance) run_conformance ;;
	*) run_all ;;
	esac 2>&1 | tee "$S/result/log"
	finish "$(cat "$S/result/rc.inner" 2>/dev/null || echo 125)"
fi

: >"$S/result/log"

mkdir -p /dev/pts /dev/shm /dev/mqueue
mount -t devpts -o newinstance,ptmxmode=0666,mode=620,gid=5 devpts /dev/pts
mount -t tmpfs -o nosuid,nodev tmpfs /dev/shm
mount -t mqueue mqueue /dev/mqueue 2>/dev/null
[ -e /dev/ptmx ] || ln -s pts/ptmx /dev/ptmx
echo pod1-vm >/proc/sys/kernel/hostname
echo "$S/modprobe" >/proc/sys/kernel/modprobe
ip link set lo up

# Writes go to the scratch disk: pods lay an overlayfs on what the tests
# write, and overlayfs cannot use an overlay (or virtiofs) as its upper
# layer. Real rkt, when built for the tests, stays visible under /var/tmp.
if [ -d /var/tmp/rkt-bin ]; then
	mkdir -p "$S/var-tmp/rkt-bin"
	mount --bind /var/tmp/rkt-bin "$S/var-tmp/rkt-bin"
	mount -o remount,bind,ro "$S/var-tmp/rkt-bin"
fi
mount --bind "$S/tmp" /tmp
mount --rbind "$S/var-tmp" /var/tmp
mount --bind "$S/root" /root
# CNI's host-local IPAM keeps its leases in /var/lib/cni, which the
# read-only host root would refuse (every --net=default pod failed with
# EROFS); vm/run.sh made sure the directory exists on the host.
mkdir -p "$S/var-lib-cni"
mount --bind "$S/var-lib-cni" /var/lib/cni
# The host's persistent journal, to which each pod's journal is linked
# as rkt's stage1 linked it (TestPodJournal): the read-only host root
# would refuse the link. The systemd layout's root is writable already.
if [ "$LAYOUT" != systemd ] && [ -d /var/log/journal ]; then
	mkdir -p "$S/var-log-journal"
	mount --bind "$S/var-log-journal" /var/log/journal
fi

[ "$LAYOUT" != systemd ] || boot_systemd

cg=/sys/fs/cgroup
session=user.slice/user-0.slice/session-1.scope
v1() {
	mount -t tmpfs -o mode=755,nosuid,nodev,noexec tmpfs $cg
	for h in cpu,cpuacct cpuset memory devices freezer net_cls,net_prio blkio pids perf_event hugetlb rdma misc; do
		ok=1
		for c in $(echo $h | tr , ' '); do
			awk -v c="$c" '$1 == c && $4 == 1 {f = 1} END {exit !f}' /proc/cgroups || ok=0
		done
		[ $ok = 1 ] || continue
		mkdir $cg/$h
		mount -t cgroup -o nosuid,nodev,noexec,$h cgroup $cg/$h || return 1
		case $h in *,*) for c in $(echo $h | tr , ' '); do ln -s $h $cg/$c; done ;; esac
	done
	mkdir $cg/systemd
	mount -t cgroup -o nosuid,nodev,noexec,none,name=systemd cgroup $cg/systemd || return 1
	mkdir -p $cg/systemd/init.scope
	echo 1 >$cg/systemd/init.scope/cgroup.procs
	for h in systemd cpu,cpuacct memory pids; do
		mkdir -p $cg/$h/$session
	done
}
v2() {
	mount -t cgroup2 -o nosuid,nodev,noexec,nsdelegate,memory_recursiveprot cgroup2 $cg ||
		mount -t cgroup2 -o nosuid,nodev,noexec cgroup2 $cg
}
case $LAYOUT in
v2)
	v2 || finish 125
	mkdir -p $cg/init.scope $cg/system.slice $cg/$session
	echo 1 >$cg/init.scope/cgroup.procs
	for c in $(cat $cg/cgroup.controllers); do echo "+$c" >$cg/cgroup.subtree_control; done
	for d in user.slice user.slice/user-0.slice; do
		for c in cpu memory pids; do echo "+$c" >$cg/$d/cgroup.subtree_control; done
	done
	into="$cg/$session"
	;;
v2root)
	v2 || finish 125
	into=""
	;;
v1)
	v1 || finish 125
	into="$cg/systemd/$session $cg/cpu,cpuacct/$session $cg/memory/$session $cg/pids/$session"
	;;
hybrid)
	v1 || finish 125
	mkdir $cg/unified
	mount -t cgroup2 -o nosuid,nodev,noexec,nsdelegate cgroup2 $cg/unified || finish 125
	mkdir -p $cg/unified/init.scope $cg/unified/$session
	echo 1 >$cg/unified/init.scope/cgroup.procs
	into="$cg/systemd/$session $cg/cpu,cpuacct/$session $cg/memory/$session $cg/pids/$session $cg/unified/$session"
	;;
esac

echo "pod1-vm: kernel $(uname -r), layout $LAYOUT, $(nproc) cpus"
echo "pod1-vm: cgroup mounts:"
grep cgroup /proc/self/mounts
[ -z "$into" ] || echo "pod1-vm: the suite runs in $into"
run_all 2>&1 | tee "$S/result/log"
finish "$(cat "$S/result/rc.inner" 2>/dev/null || echo 125)"
