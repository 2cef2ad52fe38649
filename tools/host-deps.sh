#!/usr/bin/env bash
# host-deps.sh installs the Debian packages that building pod1 and running
# its tests need, when some are missing and we are root (make test, make
# demo, make bench and .ci/run call it). As another user it only names what
# is missing: the build then goes on (the waiter is linked against glibc
# without musl-gcc) and the tests say what they lack.
set -euo pipefail

missing=()
# make, tar (image packing), util-linux (flock, used by the demo),
# libc-bin (ldd, for check-static), iptables (the CNI plugins' masquerade
# and port forwards run the host's), iproute2 (the network tests' dummy
# links).
for tool in make:make tar:tar flock:util-linux ldd:libc-bin iptables:iptables ip:iproute2; do
	command -v "${tool%%:*}" >/dev/null 2>&1 || missing+=("${tool#*:}")
done
# gcc and musl (musl-tools, whose musl-gcc wraps gcc): the stage1's waiter
# is a static C program (waiter/waiter.c), linked against musl; libc6-dev
# for WAITER_CC=gcc.
command -v gcc >/dev/null 2>&1 || missing+=(gcc)
command -v musl-gcc >/dev/null 2>&1 || missing+=(musl-tools)
compgen -G '/usr/lib/*/libc.a' >/dev/null || missing+=(libc6-dev)
# strace: a test sees the start's order of system calls through it
# (tests/tricks_test.go, which skips without it).
command -v strace >/dev/null 2>&1 || missing+=(strace)
# systemd-journald and journalctl (package systemd): the logging tests
# start a private journald and read it back; systemd need not be PID 1.
{ [ -x /lib/systemd/systemd-journald ] && command -v journalctl >/dev/null 2>&1; } || missing+=(systemd)

[ "${#missing[@]}" -eq 0 ] && exit 0
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
	echo "host-deps: missing Debian packages: ${missing[*]} (sudo apt-get install ${missing[*]})" >&2
	exit 0
fi
echo "host-deps: installing ${missing[*]}" >&2
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
