#!/bin/sh
# same-stage1.sh DIR
#
# Prints the results directories under DIR (run.sh's, one per run, named by
# their start) whose stage1 is the newest one's, oldest first. make
# vm-conformance reports them together: the whole suite, which takes hours
# under QEMU's emulator, runs as chunks (RUN=..., a VM each) one after
# another, and the chunks of one stage1 make one report, in which a test's
# last result wins. A directory of another stage1 is left out, never mixed
# in.
set -eu
[ $# = 1 ] || { echo "usage: $0 DIR" >&2; exit 2; }
sha_of() { sed -n 's/^stage1 under test: .*(sha256 \([0-9a-f]*\)).*/\1/p' "$1/env.txt" 2>/dev/null || true; }
dirs=$(find "$1" -mindepth 1 -maxdepth 1 -type d -name '[0-9]*' 2>/dev/null | sort)
[ -n "$dirs" ] || exit 0
newest=$(printf '%s\n' "$dirs" | tail -n 1)
want=$(sha_of "$newest")
[ -n "$want" ] || { echo "same-stage1.sh: $newest/env.txt names no stage1 sha256" >&2; exit 1; }
for d in $dirs; do
	[ -f "$d/summary.tsv" ] && [ "$(sha_of "$d")" = "$want" ] && echo "$d"
done
exit 0
