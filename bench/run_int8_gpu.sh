#!/usr/bin/env bash
# The int8 tensor-core checks in one device call (issue 10, part 4), everything under $OUT
# (default ./bench_out): the gpu tests of the int8 mma schedule (bit-exact against the
# interpreter), int8 GEMM against torch._int_mm, ResNet-50 batch 32 int8 against ptxc fp16
# (7 interleaved rounds: bench/resnet50_int8.py --rounds).
#
#   bash bench/run_int8_gpu.sh          # from the repository root on the GPU machine
#
# Files: int8_gpu_tests.log, gemm_int8.log + gemm_int8.json, resnet50_int8_gpu.log +
# resnet50_int8_gpu.json. Time limits (seconds, environment): TESTS_TIMEOUT (150), GEMM_TIMEOUT
# (120), RESNET_TIMEOUT (300): together under a 10-minute call; RESNET_ROUNDS (7).
# RESNET_VARIANT (e.g. "mma-stages=4", several separated by ';'): ResNet-50 also
# compiled with those map-to-gpu options, timed in the same rounds as the defaults
# (bench/resnet50_int8.py --variant; give RESNET_TIMEOUT more).
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-./bench_out}
mkdir -p "$OUT"
export OUT PYTHONPATH=.${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 PTXC_CACHE=${PTXC_CACHE:-0}
PY=${PYTHON:-python3}
echo "== int8 gpu tests"
timeout -s INT -k 15 "${TESTS_TIMEOUT:-150}" "$PY" -m pytest -m gpu -q -p no:cacheprovider \
  -o addopts="" -rfE $("$PY" -c "import xdist" 2>/dev/null && echo "-n 8") \
  tests/test_gpu_map_mma_int8.py tests/test_nan_free_rounding.py tests/test_accumulator_bound.py \
  tests/test_gpu_map_mma_m_tiles.py tests/test_gpu_map_mma_flat_m.py tests/test_index32.py \
  >"$OUT/int8_gpu_tests.log" 2>&1
echo "exit $?"; tail -5 "$OUT/int8_gpu_tests.log"
echo "== int8 GEMM vs torch._int_mm"
timeout -s INT -k 15 "${GEMM_TIMEOUT:-120}" "$PY" bench/gemm.py --precision int8 --out "$OUT" \
  --shapes 4096x4096x4096,4096x768x3072,128x768x768 >"$OUT/gemm_int8.log" 2>&1
echo "exit $?"; cat "$OUT/gemm_int8.log" | tail -8
echo "== ResNet-50 batch 32: int8 vs fp16 (ptxc, cuda, nhwc)"
VARIANTS=()
if [ -n "${RESNET_VARIANT:-}" ]; then   # several: separated by ';'
  VARIANTS=(--variant "")
  IFS=';' read -ra _vs <<< "$RESNET_VARIANT"
  for v in "${_vs[@]}"; do VARIANTS+=(--variant "$v"); done
fi
timeout -s INT -k 15 "${RESNET_TIMEOUT:-300}" "$PY" bench/resnet50_int8.py --gpu --batch 32 \
  --rounds "${RESNET_ROUNDS:-7}" "${VARIANTS[@]}" >"$OUT/resnet50_int8_gpu.log" 2>&1
echo "exit $?"; grep -E "^== |int8 / fp16|Error" "$OUT/resnet50_int8_gpu.log" | cut -c1-600
