#!/usr/bin/env bash
# netns.sh COMMAND [ARG...]   (as root)
#
# Runs COMMAND in a network namespace of its own that looks like a small
# host: lo, and one link (pod1conf0, 192.0.2.2/24, TEST-NET-1) that
# carries the default route. rkt's network tests take "the host's" first
# non-loopback link with an address as the parent of their macvlan
# networks and bridge to it: run on the real host, they would put pods on
# the machine's real network. Inside this namespace that link is one end
# of a veth pair whose other end (pod1conf1, no address) is in the
# namespace too: the gateway 192.0.2.1 never answers ARP, so nothing
# routed out is ever sent. (A dummy link would do, but not every kernel
# has the dummy driver.) Everything the tests make (veths, bridges,
# macvlans, iptables rules, the pods' routes) lives in the namespace and
# goes with it.
#
# Only the network namespace changes (nsenter --net): the mount namespace,
# /sys and the cgroup hierarchies stay the host's, so the stage1 works as
# it does outside. (`ip netns exec` would remount /sys and lose
# /sys/fs/cgroup.) On exit, also on a signal, the namespace is deleted.
# Host-global state the tests touch still is: host-local's leases in
# /var/lib/cni and the pods' network-namespace bind mounts in
# /var/run/netns, which rkt gc removes.
set -euo pipefail

[ $# -ge 1 ] || { echo "usage: $0 COMMAND [ARG...]" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "netns.sh: run as root" >&2; exit 1; }
command -v ip >/dev/null || { echo "netns.sh: needs ip (iproute2)" >&2; exit 1; }
command -v nsenter >/dev/null || { echo "netns.sh: needs nsenter (util-linux)" >&2; exit 1; }

NS=pod1-conf-$$
cleanup() { ip netns del "$NS" 2>/dev/null || true; }
trap cleanup EXIT
trap 'exit 130' INT TERM

ip netns add "$NS"
ip -n "$NS" link set lo up
ip -n "$NS" link add pod1conf0 type veth peer name pod1conf1
ip -n "$NS" addr add 192.0.2.2/24 dev pod1conf0
ip -n "$NS" link set pod1conf1 up
ip -n "$NS" link set pod1conf0 up
ip -n "$NS" route add default via 192.0.2.1 dev pod1conf0

# Not exec'd: the trap deletes the namespace once COMMAND is done.
set +e
nsenter --net="/run/netns/$NS" -- "$@"
rc=$?
set -e
exit $rc
