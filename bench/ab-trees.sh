#!/bin/sh
# ab-trees.sh DIR COMMIT... builds the pod1 tree of each commit in
# DIR/<commit> (git archive, then make all image), unless it is built
# already: the trees make bench measures beside this one (bench -ab DIR,
# issue 12's steps). Each build is bounded; a failed one is removed.
set -eu
dir=$1
shift
repo=$(git rev-parse --show-toplevel)
mkdir -p "$dir"
for c in "$@"; do
	t="$dir/$c"
	if [ -x "$t/bin/stage1-init" ] && [ -f "$t/build/stage1.aci" ]; then
		continue
	fi
	echo "ab-trees: building $c in $t"
	rm -rf "$t"
	mkdir -p "$t"
	git -C "$repo" archive "$c" | tar -x -C "$t"
	if ! timeout 1200 make -C "$t" all image >"$t.log" 2>&1; then
		echo "ab-trees: building $c failed (see $t.log)" >&2
		rm -rf "$t"
		exit 1
	fi
done
