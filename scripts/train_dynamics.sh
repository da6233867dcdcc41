#!/usr/bin/env bash
# Train the runs behind chapter 08 (training dynamics; paper Figs. 9 and 10):
#   loss temperature: n=512, k=6, inverse loss temperature 1, 4, 7, 10, for d=4 and d=32;
#   number of clusters: d=32, inverse temperature 10, k = 6, 10, 16, 25;
#   dimension:          k=6, inverse temperature 10, d = 4, 8, 16, 32;
# each with one-hot tokens (width d+k) and d-only tokens (width d), for the first three training
# seeds of the paper. Every other setting is the paper's (batch 32, Adam 0.01, gamma 1, dropout 0.01,
# evaluation every 50 steps on 10 x 32 validation tasks, ReduceLROnPlateau 0.5 / 5).
#
# SHORTENED: the paper trains 10 000 steps per run; 72 such runs cost about a day of a 2-core CPU,
# so this script trains STEPS (default 1000) steps per run. The k=10 runs are the shipped
# paper-length runs of data/weights/ and are not retrained here.
#
# Runs are ordered seed by seed, so a partial sweep has every configuration for the first seeds.
# WORKER/NWORKERS split the list between processes (worker i takes runs i, i+N, ...); finished runs
# (manifest.json present) are skipped, interrupted ones resume from last.pt.
#
# Usage:  scripts/train_dynamics.sh
#         WORKER=0 NWORKERS=2 nohup nice scripts/train_dynamics.sh > runs/dynamics/w0.log 2>&1 &
#         python scripts/ship_dynamics.py     # copy logs and manifests into data/training_dynamics/
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
OUT=${OUT:-runs/dynamics}
STEPS=${STEPS:-1000}
SEEDS=${SEEDS:-"153476998 235510766 205084180"}
THREADS=${THREADS:-1}
WORKER=${WORKER:-0}
NWORKERS=${NWORKERS:-1}
export OMP_NUM_THREADS=$THREADS MKL_NUM_THREADS=$THREADS

# d k inverse-loss-temperature (duplicates across the three sweeps listed once)
CONFIGS=(
  "32 6 10" "4 6 10"
  "32 6 1" "32 6 4" "32 6 7"
  "4 6 1" "4 6 4" "4 6 7"
  "32 16 10" "32 25 10"
  "8 6 10" "16 6 10"
)

mkdir -p "$OUT"
failed=0
index=0
for seed in $SEEDS; do
  for config in "${CONFIGS[@]}"; do
    read -r d k li <<< "$config"
    for embedding in onehot none; do
      mine=$((index % NWORKERS == WORKER))
      index=$((index + 1))
      [ "$mine" = 1 ] || continue
      dir="$OUT/d${d}_k${k}_li${li}_${embedding}_seed${seed}"
      if [ -f "$dir/manifest.json" ]; then
        echo "$(date -Is) skip $dir (finished)"
        continue
      fi
      # --resume continues an interrupted run (repairing what a kill damaged) and starts a new one
      # in an empty or missing folder
      mkdir -p "$dir"
      echo "$(date -Is) start $dir"
      if "$PYTHON" -m kmtlib.train \
        --d "$d" --k "$k" --n 512 --embedding "$embedding" --seed "$seed" \
        --steps "$STEPS" --batch 32 --lr 0.01 --loss-inv-temp "$li" --gamma 1 --dropout 0.01 \
        --family normal --eval-every 50 --val-batches 10 \
        --device cpu --threads "$THREADS" --quiet --out "$dir" --resume >> "$dir.log" 2>&1; then
        echo "$(date -Is) done  $dir"
      else
        echo "$(date -Is) FAILED $dir (exit $?; see $dir.log)"
        failed=$((failed + 1))
      fi
    done
  done
done
exit $((failed > 0))
