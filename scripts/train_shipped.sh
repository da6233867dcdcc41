#!/usr/bin/env bash
# Train the paper-configuration models the book evaluates (the paper's training recipe):
# n=512, d=32, k=10, batch 32, Adam 0.01, loss inverse temperature 10, gamma 1, dropout 0.01,
# 10 000 steps, evaluation every 50 steps on 10 x 32 validation tasks; one-hot (width d+k) and
# d-only (width d) tokens; the first three training seeds of the paper.
#
# One run at a time, one thread each (the machine is shared). Rerunning the script skips finished
# runs (manifest.json present) and resumes interrupted ones from last.pt; a resumed run ends with
# exactly the weights of an uninterrupted one (same device, same thread count).
#
# Two copies of the script may run side by side on disjoint EMBEDDINGS/SEEDS; a run folder in use
# by another process is refused (reported as FAILED, the loop goes on).
#
# Usage:  scripts/train_shipped.sh                      # all six runs, sequentially
#         SEEDS="153476998" EMBEDDINGS="onehot" scripts/train_shipped.sh
#         nohup scripts/train_shipped.sh > runs/paper/train_shipped.log 2>&1 &
# Each run writes runs/paper/<embedding>_seed<seed>/{log.csv,last.pt,best.pt,model.pt,manifest.json}
# and its console output to runs/paper/<embedding>_seed<seed>.log.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
OUT=${OUT:-runs/paper}
SEEDS=${SEEDS:-"153476998 235510766 205084180"}
EMBEDDINGS=${EMBEDDINGS:-"onehot none"}
THREADS=${THREADS:-1}
export OMP_NUM_THREADS=$THREADS MKL_NUM_THREADS=$THREADS

mkdir -p "$OUT"
failed=0
for embedding in $EMBEDDINGS; do
  for seed in $SEEDS; do
    dir="$OUT/${embedding}_seed${seed}"
    if [ -f "$dir/manifest.json" ]; then
      echo "$(date -Is) skip $dir (finished)"
      continue
    fi
    # --resume continues an interrupted run (repairing what a kill damaged) and starts a new one
    # in an empty or missing folder
    echo "$(date -Is) start $dir"
    if "$PYTHON" -m kmtlib.train \
      --d 32 --k 10 --n 512 --embedding "$embedding" --seed "$seed" \
      --steps 10000 --batch 32 --lr 0.01 --loss-inv-temp 10 --gamma 1 --dropout 0.01 \
      --family normal --eval-every 50 --val-batches 10 \
      --device cpu --threads "$THREADS" --out "$dir" --resume >> "$dir.log" 2>&1; then
      echo "$(date -Is) done  $dir"
    else
      # e.g. another process holds the folder (kmtlib.train locks it), or the run diverged
      echo "$(date -Is) FAILED $dir (exit $?; see $dir.log)"
      failed=$((failed + 1))
    fi
  done
done
exit $((failed > 0))
