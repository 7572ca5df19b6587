#!/bin/bash
# issue 38 item 0: E6 (sokoban_long, shared balanced warm-up, 150k env steps) with an RL lr warm-up of 20 optimizer
# steps, seeds 0-2, paired against E6's own GiGPO seeds 0-2 (copied in as gigpo-s*: same recipe, same shared warm-up;
# iteration 1's rollout of seed 0 matches E6's exactly). From a fixed checkout (/work/exp-s23 at 673a05f).
# PARALLEL=2 runs two seeds at once (2 cores). Resumable: rerun it; finished runs are kept and a stopped one continues from its last checkpoint.
out=/work/exp/s24/e6-warm
mkdir -p $out
for s in 0 1 2; do [ -d $out/gigpo-s$s ] || cp -r /work/main/docs/results/issue24/e6-sokoban-long/gigpo-s$s $out/; done
cd /work/exp-s23
export PYTHONPATH=/work/exp-s23 OMP_NUM_THREADS=1
exec nice -n 5 /work/main/.venv/bin/python -m gigpo compare recipes/sokoban_long.yaml --algos gigpo,warm20 \
  --variant 'warm20=gigpo trainer.warmup_steps=20' \
  --seeds 3 --budget 150000 --out $out --shared-warmup --parallel ${PARALLEL:-1} --pair warm20,gigpo \
  logging.progress=false logging.wandb_mode=disabled
