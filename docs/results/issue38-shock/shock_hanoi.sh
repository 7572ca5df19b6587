#!/bin/bash
# issue 38 item 0: Tower of Hanoi (tests/envs/hanoi_env.py, 3 disks, 2 start towers, 8 steps) warmed up to 100%
# greedy, then 4 RL iterations on sokoban_tiny's recipe: no lr warm-up against 20 steps, 4 paired seeds,
# one shared warm-up; fixed checkout af0d077 (+ the env file, which is not in it)
cd /work/exp-s21
export PYTHONPATH=/work/exp-s21:/work/main/tests/envs
exec /work/main/.venv/bin/python -m gigpo compare /work/exp/s21/hanoi-m8.yaml --algos none,warm20 \
  --variant 'none=gigpo trainer.warmup_steps=0' --variant 'warm20=gigpo trainer.warmup_steps=20' \
  --seeds 4 --out /work/exp/s21/shock-hanoi --shared-warmup --parallel 1 --pair warm20,none \
  trainer.iterations=4 trainer.eval_every=4 logging.progress=false logging.wandb_mode=disabled
