#!/bin/bash
# issue 38 item 0: make train's recipe with an RL lr warm-up of 20 optimizer steps (5 iterations) against none,
# 3 paired seeds from one shared warm-up; from a fixed checkout (/work/exp-s23 at 673a05f, gigpo/ as on main 9ff476b)
cd /work/exp-s23
export PYTHONPATH=/work/exp-s23 OMP_NUM_THREADS=1
exec nice -n 5 /work/main/.venv/bin/python -m gigpo compare recipes/sokoban_tiny.yaml --algos none,warm20 \
  --variant 'none=gigpo trainer.warmup_steps=0' --variant 'warm20=gigpo trainer.warmup_steps=20' \
  --seeds 3 --out /work/exp/s23/shock-mt --shared-warmup --parallel 1 --pair warm20,none \
  logging.progress=false logging.wandb_mode=disabled
