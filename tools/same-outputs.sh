#!/usr/bin/env bash
# Do two revisions print the same results? For refactors that must not change a number:
#   tools/same-outputs.sh BASE [OTHER]     (OTHER: the working tree when omitted)
# Runs the experiments (every CSV and the report) and `simulator.run --format json` for the
# five configurations at BERT 1K and 1M with both engines and both accountings, plus the
# other tools' outputs, in both trees, and lists every output that differs (exit 1 if any).
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BASE=${1:?usage: tools/same-outputs.sh BASE [OTHER]}
WORK=$(mktemp -d)
trap 'git -C "$ROOT" worktree remove --force "$WORK/base" >/dev/null 2>&1; [ -n "${2:-}" ] && git -C "$ROOT" worktree remove --force "$WORK/other" >/dev/null 2>&1; rm -rf "$WORK"' EXIT
git -C "$ROOT" worktree add -q --detach "$WORK/base" "$BASE"
OTHER_TREE=$ROOT
if [ -n "${2:-}" ]; then git -C "$ROOT" worktree add -q --detach "$WORK/other" "$2"; OTHER_TREE=$WORK/other; fi

COMMANDS=()
for seq in 1K 1M; do for engine in cycle analytic; do for acc in corrected published; do
  COMMANDS+=("-m simulator.run --model bert --seq $seq --engine $engine --accounting $acc --format json")
done; done; done
COMMANDS+=(
  "-m simulator.run --model xlm --seq 64K --format json"
  "-m simulator.run --model bert --seq 4K --breakdown"
  "-m simulator.run --model xlm --seq 4K --scope layer --format json"
  "-m simulator.run --seq 256K --pe-dim 128 --buffer-bytes 8MB --bandwidth 200e9 --format json"
  "-m simulator.run --accel binding --seq 4K --arch tests/data/timeloop-artifact/fusemax.yaml --format json"
  "-m simulator.sweep --grid pe_dim=128,256 buffer_bytes=8M,16M model=bert,xlm seq=64K,1M --jobs 2 --out OUT/sweep.csv"
  "-m simulator.trace --accel binding --model bert --seq 4K --epochs 6 --csv OUT/trace.csv --out OUT/trace.png"
  "-m simulator.export timeloop --accel binding --model bert --seq 4K -o OUT/export-binding"
  "-m simulator.export timeloop --accel unfused --model bert --seq 4K -o OUT/export-unfused"
  "-m simulator.cascade passes attention-3pass"
  "-m simulator.cascade ops attention-1pass --shape M=4096,P=4096 --baseline attention-3pass"
  "-m simulator.cascade compare attention-3pass attention-1pass"
  "-m simulator.run --seq banana"
  "-m experiments --out OUT/experiments --no-progress"
)

run_all() {  # tree out
  local tree=$1 out=$2 i=0
  mkdir -p "$out"
  for c in "${COMMANDS[@]}"; do
    i=$((i + 1))
    # shellcheck disable=SC2086
    (cd "$tree" && PYTHONPATH="$tree" python ${c//OUT/$out} >"$out/stdout-$i.txt" 2>&1; echo "exit $?" >>"$out/stdout-$i.txt")
  done
  # paths and timings are not results
  rm -f "$out"/experiments/*.png "$out"/experiments/*.pdf "$out"/trace.png
  find "$out" -type f -exec sed -i -E "s#$out#OUT#g; s#$tree#TREE#g" {} +
  sed -i -E 's/\(([0-9.]+ s)\)/(time)/g' "$out"/stdout-*.txt
}
run_all "$WORK/base" "$WORK/out-base"
run_all "$OTHER_TREE" "$WORK/out-other"
status=0
while IFS= read -r f; do
  rel=${f#"$WORK/out-base/"}
  if ! cmp -s "$f" "$WORK/out-other/$rel"; then
    n=${rel#stdout-}; n=${n%.txt}
    [[ $n =~ ^[0-9]+$ ]] && rel="$rel (python ${COMMANDS[$((n - 1))]})"
    echo "differs: $rel"; status=1
  fi
done < <(find "$WORK/out-base" -type f | sort)
echo "$(find "$WORK/out-base" -type f | wc -l) outputs compared; $([ $status = 0 ] && echo 'all identical' || echo 'some differ')"
exit $status
