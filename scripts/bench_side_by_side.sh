#!/usr/bin/env bash
# Benchmarks of two commits side by side: each commit in a worktree of its own, the runs alternating
# (old, new, old, new, ...) so that both see the same drift of the machine's load; ratios measured in
# one run are the numbers to compare (benchmarks/common.py).
#
#   scripts/bench_side_by_side.sh OLD_COMMIT [NEW_COMMIT=HEAD] [ROUNDS=2] [-- benchmark options]
#   e.g. scripts/bench_side_by_side.sh 6367902 HEAD 2 -- --only lloyd --only training
#
# Results: results/side_by_side/<old|new>_<round>/*.json and .log. Needs the bench extra installed
# in the current Python (python3 -m pip install -e ".[bench]").
set -euo pipefail
old=${1:?usage: $0 OLD_COMMIT [NEW_COMMIT] [ROUNDS] [-- options]}; shift
new=HEAD; rounds=2
if [[ $# -gt 0 && $1 != -- ]]; then new=$1; shift; fi
if [[ $# -gt 0 && $1 != -- ]]; then rounds=$1; shift; fi
[[ $# -gt 0 && $1 == -- ]] && shift
root=$(git rev-parse --show-toplevel)
out=$root/results/side_by_side
work=$(mktemp -d)
trap 'git -C "$root" worktree remove --force "$work/old" 2>/dev/null || true; git -C "$root" worktree remove --force "$work/new" 2>/dev/null || true; rm -rf "$work"' EXIT
git -C "$root" worktree add --detach "$work/old" "$old" >/dev/null
git -C "$root" worktree add --detach "$work/new" "$new" >/dev/null
mkdir -p "$out"
for round in $(seq 1 "$rounds"); do
  for side in old new; do
    (cd "$work/$side" && PYTHONPATH="$work/$side" python3 -m benchmarks --out "$out/${side}_$round" "$@" \
      > "$out/${side}_$round.log" 2>&1)
    echo "$side ($(git -C "$work/$side" rev-parse --short HEAD)) round $round: $out/${side}_$round.log"
  done
done
