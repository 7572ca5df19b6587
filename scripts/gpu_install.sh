#!/usr/bin/env bash
# On the lent GPU, in the call that carries the last part (scripts/gpu_stage.sh 2): stage it, check the
# bundle's checksum, install every wheel into /tmp/site and import what gigpo needs. Later calls on the
# same machine find /tmp/site (scripts/gpu_session.sh checks for it).
set -euo pipefail
mkdir -p /tmp/stage && cp .send/* /tmp/stage/
ls /tmp/stage
cd /tmp/stage
cat gpu-bundle.tar.part? > gpu-bundle.tar
sha256sum -c gpu-bundle.tar.sha256 || { echo "gpu_install.sh: a part is missing or damaged (the listing above shows" \
  "which are here); if the machine was replaced, stage again from part 0" >&2; exit 2; }
tar xf gpu-bundle.tar
rm -f gpu-bundle.tar gpu-bundle.tar.part?
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site wheels/*.whl /tmp/stage/*.whl
cd - > /dev/null
PYTHONPATH=/tmp/site:$PWD VLLM_USE_FLASHINFER_SAMPLER=0 python3 -c \
  "import vllm, deepspeed, gymnasium, xgrammar, gigpo; print('vllm', vllm.__version__, 'deepspeed', deepspeed.__version__)"
