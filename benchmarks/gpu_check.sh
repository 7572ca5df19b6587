#!/usr/bin/env bash
# The trainer on a CUDA machine with the hf backend (../shared/GPU.md, checklist item 1), as run through
# the device tool: wheels for what the GPU image lacks travel in .whl/ (see docs/gpu.md), gigpo runs from
# the checkout with `python -m gigpo`. Each ZeRO stage runs a few iterations of Sokoban with a 0.5B
# Qwen2-shaped model (151,936-token vocabulary) built on the machine, bf16, gradient checkpointing on.
# Writes each run's metrics.jsonl and log to $OUT (or ./gpu_out) and prints time and peak memory per phase.
set -uo pipefail
OUT=${OUT:-gpu_out}; mkdir -p "$OUT"
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=$PWD:/tmp/site
fi
export PYTHONUNBUFFERED=1 GIGPO_CACHE=/tmp/gigpo-cache
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$OUT/nvidia-smi.txt"
python3 -c "import torch, transformers, deepspeed; print('torch', torch.__version__, 'transformers', transformers.__version__, 'deepspeed', deepspeed.__version__)"
STAGES=${STAGES:-"0 2 3"}
ITERS=${ITERS:-3}
for z in $STAGES; do
  run=$OUT/zero$z${TAG:-}
  timeout ${RUN_TIMEOUT:-170} python3 -m gigpo train recipes/sokoban_tiny.yaml \
    model.init=${PRESET:-base05b} model.dtype=bf16 model.gradient_checkpointing=true \
    trainer.zero_stage=$z trainer.iterations=$ITERS trainer.sft_steps=${SFT_STEPS:-20} trainer.eval_every=1000 \
    trainer.save_every=$ITERS trainer.micro_token_budget=${MICRO:-8192} trainer.run_dir=$run \
    env.eval_episodes=32 logging.progress=false logging.wandb_mode=disabled ${EXTRA:-} > "$run.log" 2>&1
  echo "zero $z: exit $?"; tail -4 "$run.log"
  [ -f "$run/metrics.jsonl" ] && cp "$run/metrics.jsonl" "$run.metrics.jsonl" && python3 - "$run/metrics.jsonl" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    m = json.loads(line)
    t = {k[5:]: round(v, 2) for k, v in m.items() if k.startswith("time/")}
    g = {k[17:]: round(v, 2) for k, v in m.items() if k.startswith("perf/peak_gpu_gb/")}
    print("iter", m.get("iteration"), "env_steps", m.get("rollout/env_steps", m.get("rollout/steps")), "time", t, "peak_gpu_gb", g)
PY
done
