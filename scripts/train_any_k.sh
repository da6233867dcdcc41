#!/usr/bin/env bash
# Train the layers for any number of clusters that chapter 12 evaluates: the paper's recipe
# (n=512, d=32, batch 32, Adam 0.01, loss inverse temperature 10, gamma 1, dropout 0.01, evaluation
# every 50 steps on 10 x 32 validation tasks) with k drawn per batch from 2..16, k = 5, 9, 13 never
# trained at, equivariant query/key/value maps (kmtlib.equivariant), the token width of k = 10 in
# the attention temperature; the first three training seeds of the paper.
#
# STEPS defaults to 10 000 (the paper's); the shipped runs so far are shorter (their manifests say
# how long): rerunning with a larger STEPS resumes them from last.pt. One thread per run; rerunning
# skips finished runs (manifest.json present for the STEPS asked) and resumes interrupted ones.
#
# FORM names a parametrisation that chapter 12 compares (run folder onehot_anyk_<FORM>_seed<S>,
# codes_anyk_seed<S> for the codes):
#   FORM=mean    --cluster-broadcast mean    (cluster block a I + (b/k) 1 1^T)
#   FORM=unit    --cluster-broadcast unit    (numbers spread over the k coordinates times 1/sqrt(k))
#   FORM=logloss --loss-temperature-rule log_k (loss inverse temperature 10 ln k / ln 10)
#   FORM=codes   --embedding codes --code-width 32 (dense maps; random cluster codes drawn per task)
# The default (no FORM) is the form of the shipped layers, "ones".
#
# TASKS=broad trains on the broad family of kmtlib.domain.broad_tasks (run folder ..._broad_...) and
# INIT_FROM=model.pt starts from a saved layer's weights (folder ..._warm_...), with LR (default
# 0.01) as the learning rate: the broadly trained layer of TransformerKMeans (chapter 13) is
#   FORM=codes K_MAX=32 HELD_OUT=5,9,13,24 TASKS=broad LR=0.002 STEPS=6000 \
#   INIT_FROM=data/weights_any_k/codes_anyk_k2to32_seed153476998/model.pt scripts/train_any_k.sh
#
# Usage:  scripts/train_any_k.sh
#         STEPS=3000 SEEDS="153476998" scripts/train_any_k.sh
#         STEPS=3000 SEEDS="153476998" FORM=unit scripts/train_any_k.sh
#         K_MAX=32 HELD_OUT=5,9,13,24 FORM=mean scripts/train_any_k.sh   (another training range:
#         run folder onehot_anyk_mean_k2to32_seed<S>)
#         python scripts/ship_weights.py --runs runs/any_k --out data/weights_any_k
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
OUT=${OUT:-runs/any_k}
STEPS=${STEPS:-10000}
SEEDS=${SEEDS:-"153476998 235510766 205084180"}
THREADS=${THREADS:-1}
FORM=${FORM:-}
K_MIN=${K_MIN:-2}
K_MAX=${K_MAX:-16}
HELD_OUT=${HELD_OUT:-5,9,13}
TASKS=${TASKS:-paper}
INIT_FROM=${INIT_FROM:-}
LR=${LR:-0.01}
case "$FORM" in
  "") form_options=(); prefix="onehot_anyk" ;;
  mean|unit) form_options=(--cluster-broadcast "$FORM"); prefix="onehot_anyk_$FORM" ;;
  logloss) form_options=(--loss-temperature-rule log_k); prefix="onehot_anyk_$FORM" ;;
  codes) form_options=(--embedding codes --code-width 32); prefix="codes_anyk" ;;
  *) echo "unknown FORM=$FORM (mean, unit, logloss or codes)" >&2; exit 2 ;;
esac
task_options=(--tasks "$TASKS")
if [ "$TASKS" = broad ]; then prefix="${prefix}_broad"; fi
if [ -n "$INIT_FROM" ]; then task_options+=(--init-from "$INIT_FROM"); prefix="${prefix}_warm"; fi
export OMP_NUM_THREADS=$THREADS MKL_NUM_THREADS=$THREADS

mkdir -p "$OUT"
failed=0
for seed in $SEEDS; do
  range=""
  if [ "$K_MIN,$K_MAX,$HELD_OUT" != "2,16,5,9,13" ]; then range="_k${K_MIN}to${K_MAX}"; fi
  dir="$OUT/${prefix}${range}_seed${seed}"
  if [ -f "$dir/manifest.json" ] && grep -q "\"steps\": $STEPS," "$dir/manifest.json"; then
    echo "$(date -Is) skip $dir (finished at $STEPS steps)"
    continue
  fi
  echo "$(date -Is) start $dir"
  if "$PYTHON" -m kmtlib.train \
    --d 32 --k 10 --n 512 --k-min "$K_MIN" --k-max "$K_MAX" --k-held-out "$HELD_OUT" --seed "$seed" \
    --steps "$STEPS" --batch 32 --lr "$LR" --loss-inv-temp 10 --gamma 1 --dropout 0.01 \
    --family normal --eval-every 50 --val-batches 10 \
    "${form_options[@]}" "${task_options[@]}" --device cpu --threads "$THREADS" --out "$dir" --resume >> "$dir.log" 2>&1; then
    echo "$(date -Is) done  $dir"
  else
    echo "$(date -Is) FAILED $dir (exit $?; see $dir.log)"
    failed=$((failed + 1))
  fi
done
exit $((failed > 0))
