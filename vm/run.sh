#!/bin/sh
# vm/run.sh: boots a throwaway VM on a distribution kernel and runs a
# checkout's integration suite inside it, in a chosen cgroup layout.
#
#   vm/run.sh [REPO]          (as root; `make vm-test` calls it)
#
# Environment:
#   LAYOUT   v2 | v2root | v1 | hybrid | systemd, or several separated by
#            spaces (default "v2 v1"): see vm/guest.sh for what each is.
#   SUITE    integration (default: the checkout's tests/) or conformance
#            (rkt's functional suite, tools/rkt-conformance, built here
#            into CONF_WORK; systemd layout only). RUN narrows either.
#   CONF_WORK  run.sh's WORK for SUITE=conformance (default
#            VM_CACHE/conformance); CONF_TIMEOUT its per-test limit in
#            seconds (default 900: the emulator is slow).
#   KERNEL   a Debian kernel package name (default linux-image-amd64, a
#            metapackage is followed to its image) or the path of a .deb.
#   RUN      a `go test -run` regex (default: every test).
#   REPO     the checkout to test (default: the one holding this script);
#            the first argument overrides it.
#   VM_MEM   guest memory in MiB (default 6144); VM_CPUS (default: all).
#   VM_ACCEL kvm or tcg (default: kvm where the CPU has vmx/svm, else tcg).
#   VM_CPU_TCG  QEMU's -cpu under tcg (default: max without AVX and fast
#            string moves, which the emulator runs slowly).
#   VM_TIMEOUT  minutes the inner suite may take (default 90).
#   VM_EVENT_DEADLINE  how long a test waits for one event (default 15m;
#            the tests' POD1_TEST_EVENT_DEADLINE).
#   VM_CACHE kernel cache (default /var/cache/pod1-vm).
#
# The kernel package is downloaded with `apt-get download` and unpacked
# into VM_CACHE, never installed: nothing goes into the host's /boot or
# /lib/modules. The host's / is shared read-only with the guest through
# virtiofs; everything the guest writes goes to a sparse ext4 disk image
# deleted at exit. The inner output is written to
# REPO/build/vm/<layout>.log; the exit code is the inner suite's (the
# first failing layout's), 125 when the VM itself could not run.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
REPO=${1:-${REPO:-$(dirname "$here")}}
REPO=$(cd "$REPO" && pwd)
LAYOUT=${LAYOUT:-v2 v1}
KERNEL=${KERNEL:-linux-image-amd64}
RUN=${RUN:-}
SUITE=${SUITE:-integration}
VM_MEM=${VM_MEM:-6144}
VM_CPUS=${VM_CPUS:-$(nproc)}
VM_TIMEOUT=${VM_TIMEOUT:-90}
VM_CACHE=${VM_CACHE:-/var/cache/pod1-vm}
CONF_WORK=${CONF_WORK:-$VM_CACHE/conformance}
CONF_TIMEOUT=${CONF_TIMEOUT:-900}
# How long a test waits for one event before it calls it a hang: the
# emulator on a loaded machine is tens of times slower than a host.
VM_EVENT_DEADLINE=${VM_EVENT_DEADLINE:-15m}
export DEBIAN_FRONTEND=noninteractive

die() { echo "vm-test: $*" >&2; exit 125; }

[ "$(id -u)" = 0 ] || die "needs root (sudo make vm-test): it starts real pods in the guest and needs /dev/kvm or a long TCG run"
for l in $LAYOUT; do
	case $l in v2 | v2root | v1 | hybrid | systemd) ;; *) die "LAYOUT: unknown layout \"$l\" (v2, v2root, v1, hybrid, systemd)" ;; esac
done
case $SUITE in
integration) ;;
conformance) [ "$LAYOUT" = systemd ] || die "SUITE=conformance runs in LAYOUT=systemd only, not \"$LAYOUT\"" ;;
*) die "SUITE: integration or conformance, not \"$SUITE\"" ;;
esac
case $CONF_WORK in /*) ;; *) die "CONF_WORK: an absolute path, not \"$CONF_WORK\"" ;; esac
case $CONF_TIMEOUT in '' | *[!0-9]*) die "CONF_TIMEOUT: a number of seconds, not \"$CONF_TIMEOUT\"" ;; esac
if [ "$LAYOUT" = systemd ] || [ "${LAYOUT#*systemd}" != "$LAYOUT" ]; then
	[ -x /lib/systemd/systemd ] || die "LAYOUT=systemd boots the host's /lib/systemd/systemd, which is missing (apt-get install systemd)"
fi

# What the runner needs from the host, installed from Debian when missing.
need_pkgs=""
command -v qemu-system-x86_64 >/dev/null 2>&1 || need_pkgs="$need_pkgs qemu-system-x86"
virtiofsd=""
for p in /usr/lib/qemu/virtiofsd /usr/libexec/virtiofsd; do [ -x $p ] && virtiofsd=$p && break; done
[ -n "$virtiofsd" ] || need_pkgs="$need_pkgs qemu-system-common"
[ -x /bin/busybox ] && file -L /bin/busybox 2>/dev/null | grep -q 'statically linked' || need_pkgs="$need_pkgs busybox-static"
command -v file >/dev/null 2>&1 || need_pkgs="$need_pkgs file"
command -v mkfs.ext4 >/dev/null 2>&1 || need_pkgs="$need_pkgs e2fsprogs"
command -v depmod >/dev/null 2>&1 || need_pkgs="$need_pkgs kmod"
command -v xz >/dev/null 2>&1 || need_pkgs="$need_pkgs xz-utils"
command -v zstd >/dev/null 2>&1 || need_pkgs="$need_pkgs zstd"
# machined, for the pods' registration (systemd's own package leaves it out).
if [ "${LAYOUT#*systemd}" != "$LAYOUT" ]; then
	[ -x /lib/systemd/systemd-machined ] || need_pkgs="$need_pkgs systemd-container"
fi
if [ -n "$need_pkgs" ]; then
	echo "vm-test: installing$need_pkgs"
	apt-get install -y -qq --no-install-recommends $need_pkgs >/dev/null || {
		apt-get update -qq && apt-get install -y -qq --no-install-recommends $need_pkgs >/dev/null
	} || die "apt-get install$need_pkgs failed"
	for p in /usr/lib/qemu/virtiofsd /usr/libexec/virtiofsd; do [ -x $p ] && virtiofsd=$p && break; done
	if [ -z "$virtiofsd" ]; then
		apt-get install -y -qq --no-install-recommends virtiofsd >/dev/null || true
		for p in /usr/lib/qemu/virtiofsd /usr/libexec/virtiofsd; do [ -x $p ] && virtiofsd=$p && break; done
	fi
	[ -n "$virtiofsd" ] || die "no virtiofsd after installing qemu-system-common and virtiofsd"
fi

work=""
qpid=""
vpid=""
cleanup() {
	rc=$?
	trap - EXIT INT TERM HUP
	# qpid is timeout(1), which passes the TERM on to QEMU.
	[ -n "$qpid" ] && kill -TERM "$qpid" 2>/dev/null
	[ -n "$vpid" ] && kill -TERM "$vpid" 2>/dev/null
	[ -n "$qpid" ] && wait "$qpid" 2>/dev/null
	[ -n "$vpid" ] && wait "$vpid" 2>/dev/null
	[ -n "$work" ] && rm -rf "$work"
	exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

mkdir -p "$VM_CACHE"
# The guest mounts its scratch disk over /var/lib/cni (the CNI leases),
# which needs the mount point on the shared, read-only host root.
mkdir -p /var/lib/cni
work=$(mktemp -d /var/tmp/pod1-vm.XXXXXX)

# --- the kernel: downloaded and unpacked into the cache, under a lock so
# that two runs can share it.
kernel_root() {
	exec 9>"$VM_CACHE/lock"
	flock 9
	mkdir -p "$VM_CACHE/debs"
	spec=$KERNEL
	i=0
	while :; do
		i=$((i + 1))
		[ $i -le 4 ] || die "KERNEL: $KERNEL does not lead to a kernel image package"
		case $spec in
		*.deb)
			[ -f "$spec" ] || die "KERNEL: no file $spec"
			deb=$(cd "$(dirname "$spec")" && pwd)/$(basename "$spec")
			;;
		*)
			ver=$(apt-cache policy "$spec" 2>/dev/null | awk '/Candidate:/ {print $2}')
			[ -n "$ver" ] && [ "$ver" != "(none)" ] || die "KERNEL: no package $spec in the apt sources"
			deb=$(ls "$VM_CACHE/debs/${spec}_$(echo "$ver" | sed 's/:/%3a/')_"*.deb 2>/dev/null | head -n1 || true)
			if [ -z "$deb" ]; then
				(cd "$VM_CACHE/debs" && apt-get download -qq -o APT::Sandbox::User=root "$spec=$ver" >&2) || die "KERNEL: apt-get download $spec failed"
				deb=$(ls "$VM_CACHE/debs/${spec}_"*.deb | head -n1)
			fi
			;;
		esac
		if dpkg-deb -c "$deb" | grep ' \./boot/vmlinuz-' >/dev/null; then
			break
		fi
		# A metapackage: follow its dependency on the image package.
		spec=$(dpkg-deb -f "$deb" Depends | tr ',|' '\n\n' | sed 's/^ *//; s/ .*//' | grep '^linux-image-' | head -n1)
		[ -n "$spec" ] || die "KERNEL: $deb holds no kernel and depends on no linux-image package"
	done
	key=$(basename "$deb" .deb)
	root=$VM_CACHE/kernels/$key
	if [ ! -f "$root/.unpacked" ]; then
		rm -rf "$root"
		mkdir -p "$root"
		dpkg-deb -x "$deb" "$root" || die "unpacking $deb failed"
		# depmod and modprobe -d look under lib/modules; merged-/usr
		# packages ship usr/lib/modules.
		if [ ! -d "$root/lib/modules" ] && [ -d "$root/usr/lib/modules" ]; then
			ln -s usr/lib "$root/lib"
		fi
		kv=$(ls "$root/boot" | sed -n 's/^vmlinuz-//p' | head -n1)
		depmod -b "$root" "$kv" >&2 || die "depmod for $kv failed"
		touch "$root/.unpacked"
	fi
	flock -u 9
	exec 9>&-
	echo "$root"
}
kroot=$(kernel_root)
kver=$(ls "$kroot/boot" | sed -n 's/^vmlinuz-//p' | head -n1)
[ -n "$kver" ] || die "no vmlinuz in $kroot/boot"
echo "vm-test: kernel $kver ($kroot)"

# --- the initramfs: busybox and the modules the guest needs before its
# root (virtiofs) and scratch disk (ext4) can be mounted, plus those the
# suite needs (overlay, veth, bridge, netfilter); the rest load on demand
# through vm/guest.sh's modprobe wrapper. modprobe --show-depends is asked
# one module per call: given several it silently drops all but the first.
mkdir -p "$work/initramfs/bin" "$work/initramfs/modules" "$work/initramfs/proc" \
	"$work/initramfs/sys" "$work/initramfs/dev" "$work/initramfs/newroot"
cp /bin/busybox "$work/initramfs/bin/busybox"
mknod -m 600 "$work/initramfs/dev/console" c 5 1
cp "$here/init" "$work/initramfs/init"
chmod 755 "$work/initramfs/init"
: >"$work/initramfs/modules/order"
for m in virtio_pci virtio_blk virtio_rng virtiofs ext4 overlay loop veth bridge br_netfilter \
	dummy macvlan ipvlan tun nf_tables nft_chain_nat nft_compat iptable_filter iptable_nat \
	ip6table_filter ip6table_nat xt_MASQUERADE xt_conntrack xt_comment xt_mark xt_addrtype; do
	deps=$(modprobe -d "$kroot" -S "$kver" --show-depends "$m" 2>/dev/null) || {
		echo "vm-test: kernel $kver has no module $m; skipped"
		continue
	}
	echo "$deps" | awk '$1 == "insmod" {print $2}' | while read -r ko; do
		name=$(basename "$ko")
		name=${name%.xz}
		name=${name%.zst}
		name=${name%.gz}
		grep -qx "$name" "$work/initramfs/modules/order" && continue
		case $ko in
		*.xz) xz -dc "$ko" >"$work/initramfs/modules/$name" ;;
		*.zst) zstd -qdc "$ko" >"$work/initramfs/modules/$name" ;;
		*.gz) gzip -dc "$ko" >"$work/initramfs/modules/$name" ;;
		*) cp "$ko" "$work/initramfs/modules/$name" ;;
		esac
		echo "$name" >>"$work/initramfs/modules/order"
	done
done
(cd "$work/initramfs" && find . | busybox cpio -o -H newc 2>/dev/null | gzip -1) >"$work/initrd.gz"

# --- what the guest runs: the checkout, built on the host, and its test
# binaries (compiled here: the guest has no writable Go cache, and
# compiling under the emulator would take longer than the suite).
echo "vm-test: building $REPO"
make -C "$REPO" all image rkt test-helpers >/dev/null || die "make all image rkt test-helpers in $REPO failed"
# The checkout goes under the guest's /tmp: on the same mount as the pods
# the tests make there, so that hard links from bin/ work as on a host
# with TMPDIR and the checkout on one file system.
mkdir -p "$work/stage/tmp/pod1-vm/repo" "$work/stage/testbin" "$work/stage/tmp" "$work/stage/var-tmp" "$work/stage/root" "$work/stage/result"
chmod 1777 "$work/stage/tmp" "$work/stage/var-tmp"
chmod 700 "$work/stage/root"
(cd "$REPO" && tar --exclude=./.git --exclude=./build/vm -cf - .) | (cd "$work/stage/tmp/pod1-vm/repo" && tar -xf -)
: >"$work/stage/testbin/list"
[ "$SUITE" = conformance ] || (cd "$REPO" && go list -f '{{if or .TestGoFiles .XTestGoFiles}}{{.Dir}}{{end}}' ./tests/...) | while read -r d; do
	rel=${d#"$REPO"/}
	name=$(echo "$rel" | tr / _)
	(cd "$REPO" && CGO_ENABLED=0 go test -c -o "$work/stage/testbin/$name.test" "./$rel") || exit 1
	echo "$rel $name.test" >>"$work/stage/testbin/list"
done || die "compiling the tests of $REPO failed"
if [ "$SUITE" = conformance ]; then
	# rkt's suite is built here, where the module proxy is reachable (the
	# guest has no network), and copied to the scratch disk without the
	# Go caches: the guest only runs it.
	echo "vm-test: building rkt's functional suite in $CONF_WORK"
	WORK=$CONF_WORK "$REPO/tools/rkt-conformance/run.sh" "$REPO/build/stage1.aci" build >&2 ||
		die "tools/rkt-conformance/run.sh build failed"
	mkdir -p "$work/stage/conformance-work"
	(cd "$CONF_WORK" && tar --exclude=./gocache --exclude=./gomodcache --exclude=./results \
		--exclude=./tmp --exclude=./functional-tmp --exclude=./.lock -cf - .) |
		(cd "$work/stage/conformance-work" && tar -xf -) || die "copying $CONF_WORK failed"
fi
cp "$here/guest.sh" "$work/stage/guest.sh"
chmod 755 "$work/stage/guest.sh"

# The guest's modprobe, for modules the kernel asks for on demand: the
# host has no /lib/modules for the guest's kernel, so it is pointed at the
# cache through the read-only share.
printf '#!/bin/sh\nexec /sbin/modprobe -d %s "$@"\n' "$kroot" >"$work/stage/modprobe"
chmod 755 "$work/stage/modprobe"

if [ -z "${VM_ACCEL:-}" ]; then
	VM_ACCEL=tcg
	if grep -qE '^flags.*\b(vmx|svm)\b' /proc/cpuinfo && [ -w /dev/kvm ]; then VM_ACCEL=kvm; fi
fi
# Under the emulator the guest's CPU has no AVX and no fast string
# moves: QEMU emulates those instructions one helper call at a time, and
# Go picks them for its memmove and sha512 where the CPU says it has them.
# rkt's import of the stage1 (sha512 of the image) took 3 times as long
# with `-cpu max` (docs/hosts.md).
VM_CPU_TCG=${VM_CPU_TCG:-max,avx=off,avx2=off,erms=off,fsrm=off}
case $VM_ACCEL in
kvm) accel="-accel kvm -cpu host" ;;
tcg) accel="-accel tcg,thread=multi -cpu $VM_CPU_TCG" ;;
*) die "VM_ACCEL: kvm or tcg, not $VM_ACCEL" ;;
esac

mkdir -p "$REPO/build/vm"
worst=0
for layout in $LAYOUT; do
	log=$REPO/build/vm/$layout.log
	[ "$SUITE" != conformance ] || log=$REPO/build/vm/$layout-conformance.log
	rm -f "$log"
	{
		echo "LAYOUT='$layout'"
		printf "RUN='%s'\n" "$(printf %s "$RUN" | sed "s/'/'\\\\''/g")"
		echo "TIMEOUT='${VM_TIMEOUT}m'"
		echo "EVENT_DEADLINE='${VM_EVENT_DEADLINE}'"
		echo "KROOT='$kroot'"
		echo "SUITE='$SUITE'"
		echo "ACCEL='$VM_ACCEL'"
		echo "CONF_WORK='$CONF_WORK'"
		echo "CONF_TIMEOUT='$CONF_TIMEOUT'"
	} >"$work/stage/env"
	disk=$work/scratch.img
	rm -f "$disk"
	truncate -s 32G "$disk"
	mkfs.ext4 -q -F -L pod1-scratch -d "$work/stage" "$disk" || die "mkfs.ext4 of the scratch disk failed"
	# The guest writes its output and exit code as a tar on a raw disk of
	# their own: read back after the VM is gone, with no file system (and
	# journal) in between.
	result=$work/result.img
	rm -f "$result"
	truncate -s 1G "$result"

	sock=$work/virtiofs.sock
	rm -f "$sock"
	if "$virtiofsd" --help 2>&1 | grep -q -- '--shared-dir'; then
		"$virtiofsd" --socket-path="$sock" --shared-dir=/ --sandbox=chroot --cache=always --log-level=warn </dev/null &
	else
		"$virtiofsd" --socket-path="$sock" -o source=/ -o sandbox=chroot -o cache=always -o log_level=warn </dev/null &
	fi
	vpid=$!
	i=0
	while [ ! -S "$sock" ]; do
		i=$((i + 1))
		[ $i -lt 100 ] || die "virtiofsd did not create its socket"
		kill -0 "$vpid" 2>/dev/null || die "virtiofsd exited"
		sleep 0.1
	done

	echo "vm-test: booting $kver, layout $layout, $accel, $VM_CPUS cpus, ${VM_MEM} MiB; inner output in $log"
	start=$(date +%s)
	# shellcheck disable=SC2086
	timeout -s KILL $((VM_TIMEOUT * 60 + 600)) qemu-system-x86_64 $accel \
		-machine q35 -smp "$VM_CPUS" -m "$VM_MEM" \
		-object memory-backend-memfd,id=mem,size="${VM_MEM}M",share=on -numa node,memdev=mem \
		-kernel "$kroot/boot/vmlinuz-$kver" -initrd "$work/initrd.gz" \
		-append "console=ttyS0 panic=-1 loglevel=4 rdinit=/init" \
		-chardev socket,id=fs0,path="$sock" -device vhost-user-fs-pci,chardev=fs0,tag=hostroot \
		-drive file="$disk",if=virtio,format=raw,cache=unsafe,discard=unmap \
		-drive file="$result",if=virtio,format=raw \
		-device virtio-rng-pci -nic none -display none -monitor none -serial stdio -no-reboot \
		</dev/null &
	qpid=$!
	wait "$qpid" || true
	qpid=""
	wait "$vpid" 2>/dev/null || true
	vpid=""
	echo "vm-test: layout $layout: VM ran $(($(date +%s) - start)) s"

	rm -f "$disk"
	tar -xOf "$result" log >"$log" 2>/dev/null || true
	if [ "$SUITE" = conformance ]; then
		# run.sh's results directories, for conformance.sh to report.
		# Earlier runs' are kept: a whole suite is run as chunks, and
		# make vm-conformance reports the chunks of one stage1 together
		# (tools/rkt-conformance/same-stage1.sh).
		mkdir -p "$REPO/build/vm/conformance"
		tar -xf "$result" -C "$REPO/build/vm/conformance" --strip-components=1 conformance 2>/dev/null ||
			echo "vm-test: the guest wrote no conformance results"
	fi
	rc=$(tar -xOf "$result" rc 2>/dev/null | tr -dc 0-9)
	rm -f "$result"
	if [ -z "$rc" ]; then
		echo "vm-test: layout $layout: the guest wrote no exit code (it crashed or timed out; see the console above)"
		rc=125
	fi
	echo "vm-test: layout $layout: exit $rc; log $log"
	[ "$worst" != 0 ] || worst=$rc
done
exit "$worst"
