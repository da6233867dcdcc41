#!/usr/bin/env bash
# Train a layer for the job TransformerKMeans gives it (chapter 13, "A layer trained for the job
# it does"): warm-started from the shipped layer (kmtlib/pretrained/any_k_broad.pt), on the broad
# family presented as the estimator presents data (its DomainMap, its greedy k-means++ centres),
# LAYER_STEPS layer steps per start (the estimator's default 20), the loss lloyd_gap (the gap of the
# softly polished result to Lloyd's fixed point from the same start; kmtlib.training.estimator_use),
# learning rate LR (default 0.0002: at 0.002, the shipped layer's, the 20 unrolled steps diverged
# within 100 steps), batch 8, k drawn per batch from 2..32 without 5, 9, 13, 24 (as the shipped
# layer). One thread, nice 19; rerunning resumes from last.pt (a larger STEPS extends the run).
#
# Usage:  scripts/train_estimator_layer.sh                 (STEPS=1000 by default)
#         STEPS=400 scripts/train_estimator_layer.sh       (stop or finish at 400 steps)
# Held-out evaluation (data/estimator_layer/heldout.json) afterwards:
#         python scripts/estimator_layer.py --layer runs/estimator_layer/codes_anyk_estimator_seed153476998/model.pt
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
OUT=${OUT:-runs/estimator_layer}
STEPS=${STEPS:-1000}
SEED=${SEED:-153476998}
LAYER_STEPS=${LAYER_STEPS:-20}
LR=${LR:-0.0002}
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
dir="$OUT/codes_anyk_estimator_seed$SEED"
mkdir -p "$dir"
echo "$(date -Is) start $dir"
nice -n 19 "$PYTHON" -m kmtlib.train \
  --d 32 --k 10 --n 512 --k-min 2 --k-max 32 --k-held-out 5,9,13,24 --seed "$SEED" \
  --steps "$STEPS" --batch 8 --lr "$LR" --gamma 1 --dropout 0.01 --eval-every 50 --val-batches 4 \
  --embedding codes --code-width 32 --tasks broad --starts estimator --loss lloyd_gap --layer-steps "$LAYER_STEPS" \
  --init-from kmtlib/pretrained/any_k_broad.pt --device cpu --threads 1 --out "$dir" --resume >> "$dir.log" 2>&1
echo "$(date -Is) done  $dir"
