#!/usr/bin/env bash
# Here, before a lent GPU's device calls: what each staging call carries, checked against the 64 MiB a call
# may send (the checkout travels with every call). docs/gpu.md has the calls in order.
#
#   bash scripts/gpu_stage.sh bundle    # once: ../shared/gpu's bundle plus the wheels it lacks, in 3 parts
#   bash scripts/gpu_stage.sh 0|1|2     # .send/ holds part K (part 2 also the checksum and the extra wheels)
#
# Three parts of at most 59 MiB, not the bundle's four of 45: each call costs device time, and they fit when
# the checkout is small (the last part is smaller: it carries the extra wheels too). The checkout is not (docs/results holds ~35 MB of run records), so this refuses until the
# folders named in its message are moved aside for the calls (and back afterwards).
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
LIMIT=$((64 * 1024 * 1024))
PY=${PYTHON:-.venv/bin/python}

case ${1:-} in
  bundle)
    grep -qx '/.gpu/' .git/info/exclude 2>/dev/null || { mkdir -p .git/info; printf '/.gpu/\n/.send/\n' >> .git/info/exclude; }
    bash ../shared/gpu/make_bundle.sh .gpu
    # vLLM 0.26's LLM() imports xgrammar (structured outputs) and xgrammar needs tvm-ffi; the bundle has
    # neither (found on the H200, 2026-11-28). 0.2.7 is the newest xgrammar that accepts vLLM's tvm-ffi pin.
    rm -rf .gpu/extra && mkdir -p .gpu/extra
    "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
      --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 \
      -d .gpu/extra xgrammar==0.2.7 apache-tvm-ffi==0.1.10
    cat .gpu/gpu-bundle.tar.part? > .gpu/gpu-bundle.tar
    (cd .gpu && sha256sum -c gpu-bundle.tar.sha256)
    rm -f .gpu/gpu-bundle.tar.part?
    split -b 59M -d -a 1 .gpu/gpu-bundle.tar .gpu/gpu-bundle.tar.part && rm .gpu/gpu-bundle.tar
    ls -l .gpu .gpu/extra ;;
  0|1|2)
    rm -rf .send && mkdir .send
    cp ".gpu/gpu-bundle.tar.part$1" .send/
    [ "$1" = 2 ] && cp .gpu/gpu-bundle.tar.sha256 .gpu/extra/*.whl .send/
    checkout=$( (git ls-files -co --exclude-standard -z | du -cb --files0-from=- 2>/dev/null || true) | tail -1 | cut -f1)  # files moved aside count 0
    sending=$(du -sb .send | cut -f1)
    total=$((checkout + sending))
    echo "part $1: checkout $((checkout / 1048576)) MiB + .send $((sending / 1048576)) MiB = $((total / 1048576)) MiB (limit 64)"
    if [ "$total" -gt "$LIMIT" ]; then
      echo "too large for one call: move the largest tracked folders aside for the device calls, e.g." >&2
      git ls-files -z | xargs -0 du -cb 2>/dev/null | grep -v total | awk '{split($2, p, "/"); d = p[1] "/" p[2]; s[d] += $1}
        END {for (d in s) printf "%8.1f MiB  %s\n", s[d] / 1048576, d}' | sort -rn | head -4 >&2
      echo "  (mv docs/results /tmp/results-aside; then mv it back after the last call)" >&2
      exit 1
    fi ;;
  *) echo "usage: gpu_stage.sh bundle | 0 | 1 | 2" >&2; exit 2 ;;
esac
