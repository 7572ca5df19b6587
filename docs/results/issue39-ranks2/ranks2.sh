#!/bin/bash
# issue 39 item 2: a 2-rank sokoban_tiny (make train's recipe) run learns as a 1-rank run does: 3 paired seeds
# from one shared warm-up; fixed checkout 72b9909 so later commits do not change the code
cd /work/exp-s22
export PYTHONPATH=/work/exp-s22 OMP_NUM_THREADS=1
exec nice -n 10 /work/main/.venv/bin/python -m gigpo compare recipes/sokoban_tiny.yaml --algos r1,r2 \
  --variant 'r1=gigpo trainer.nprocs=1' --variant 'r2=gigpo trainer.nprocs=2' \
  --seeds 3 --out /work/exp/s22/ranks2 --shared-warmup --parallel 1 --pair r2,r1 \
  logging.progress=false logging.wandb_mode=disabled
