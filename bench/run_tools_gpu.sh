#!/usr/bin/env bash
# The ptxc tools on the GPU machine (one device call, under 10 minutes): `ptxc bench
# light:resnet50 --profile` on cuda (the table that goes in bench/RESULTS.md), its Chrome trace,
# `ptxc compare` on cuda against onnxruntime, and the gpu-marked tests of the tools and of
# run_device interop (DLPack/CUDA array interface in, torch out, caller's stream; zero copies:
# the kernels get the tensors' own pointers, engine.program.interop counts every copy).
#
#   OUT=./bench_out bash bench/run_tools_gpu.sh
#
# Writes under $OUT: tools_gpu.log (everything), bench_resnet50.json (latency, profile rows),
# trace_resnet50.json (Perfetto), compare_resnet50.json, tools_gpu_tests.xml.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-./bench_out}
mkdir -p "$OUT"
# a fresh compile cache: the first command compiles ResNet-50 for real, the later ones load it
export PYTHONPATH=.${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 PTXC_CACHE=1
export PTXC_CACHE_DIR=$(mktemp -d /tmp/ptxc-tools-cache.XXXXXX)
PY=${PYTHON:-python3}
LOG="$OUT/tools_gpu.log"
: >"$LOG"
run() { echo "== $*" | tee -a "$LOG"; timeout "${T:-240}" "$@" 2>&1 | tee -a "$LOG"; echo "== exit ${PIPESTATUS[0]}" | tee -a "$LOG"; }
echo "== $(date -u '+%Y-%m-%d %H:%M:%S') UTC, commit $(git rev-parse --short HEAD 2>/dev/null)" | tee -a "$LOG"
nvidia-smi -L 2>&1 | tee -a "$LOG"
T=300 run "$PY" -m ptxc bench light:resnet50 --target cuda --warmup 20 --iterations 200 \
    --profile --json "$OUT/bench_resnet50.json" --export-profile "$OUT/trace_resnet50.json"
T=90 run "$PY" -m ptxc -q bench light:resnet50 --target cuda --cuda-graph off --iterations 100
T=150 run "$PY" -m ptxc compare light:resnet50 --target cuda --atol 1e-3 --rtol 1e-3 \
    --json "$OUT/compare_resnet50.json"
T=180 run "$PY" -m pytest -q -m gpu tests/gpu/test_interop.py tests/test_bench.py \
    -p no:cacheprovider --junitxml="$OUT/tools_gpu_tests.xml"
T=60 run "$PY" -m pytest -q tests/test_interop_binding.py -p no:cacheprovider
echo "== total ${SECONDS} s" | tee -a "$LOG"
rm -rf "$PTXC_CACHE_DIR"
