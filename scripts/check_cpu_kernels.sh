#!/usr/bin/env bash
# Runs the numerical tests under each CPU kernel family PyTorch can pick on this machine
# (ATEN_CPU_CAPABILITY=default, avx2, and avx512 where /proc/cpuinfo lists avx512f), so a tolerance that
# only holds for this CPU's kernels fails here rather than on someone else's machine.
# Usage: scripts/check_cpu_kernels.sh [extra pytest args]   (output: docs/results/cpu_kernels.log)
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
LOG=${LOG:-docs/results/cpu_kernels.log}
TESTS=(tests/trainer/test_losses.py tests/trainer/test_engines.py tests/trainer/test_lora.py tests/rollout/test_hf.py
       tests/advantage)
capabilities=(default avx2)
grep -qw avx512f /proc/cpuinfo && capabilities+=(avx512)
mkdir -p "$(dirname "$LOG")"
{
  echo "# $(date -u +%FT%TZ) $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | xargs)"
  echo "# torch $("$PY" -c 'import torch; print(torch.__version__)'), capabilities: ${capabilities[*]}"
} > "$LOG"
status=0
for cap in "${capabilities[@]}"; do
  echo "== ATEN_CPU_CAPABILITY=$cap" | tee -a "$LOG"
  # the capability PyTorch really used (it falls back silently when the CPU lacks one)
  ATEN_CPU_CAPABILITY=$cap "$PY" -c 'import torch; print("used:", torch.backends.cpu.get_cpu_capability())' | tee -a "$LOG"
  ATEN_CPU_CAPABILITY=$cap OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} PYTHONPATH=$PWD \
    "$PY" -m pytest -q -p no:cacheprovider "${TESTS[@]}" "$@" 2>&1 | grep -E "passed|failed|error|FAILED|ERROR" | tee -a "$LOG"
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
done
exit $status
