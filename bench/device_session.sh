#!/usr/bin/env bash
# One device call for the checks a session owes the GPU, from the repository root:
#
#   OUT=out T1=270 T2=290 B=1 R=7 OLD=/path/to/old/checkout bash bench/device_session.sh
#
# T1 seconds: the GPU suite (pytest -m gpu, NW workers, JUnit XML in $OUT/gpu_tests.xml);
# T2 seconds: bench/compare_trees.py, this tree against $OLD (a checkout or `git archive` of an
# older ptxc) at batches $B, $R rounds (latency, host time and device time per call); then, with
# TUNE=1, bench/gpu.py --tuning fast on $M (T3 seconds) with a timing cache in $OUT. A stage with
# 0 seconds is skipped. Everything it writes is under $OUT.
set -u
export PYTHONPATH=. PYTHONUNBUFFERED=1 PTXC_CACHE=0
OUT=${OUT:-./bench_out}
mkdir -p "$OUT"
nvidia-smi -L
if [ "${T1:-0}" != 0 ]; then
  t0=$(date +%s)
  timeout -s INT -k 20 "$T1" python3 -m pytest -m gpu -q -p no:cacheprovider -o addopts="" \
    -n "${NW:-12}" -rfEX --junitxml="$OUT/gpu_tests.xml" tests > "$OUT/gpu_tests.log" 2>&1
  echo "gpu tests rc=$? in $(( $(date +%s) - t0 )) s"
  tail -25 "$OUT/gpu_tests.log"
fi
if [ "${T2:-0}" != 0 ]; then
  t0=$(date +%s)
  mkdir -p "$OUT/compare"
  OUT="$OUT/compare" timeout -s INT -k 20 "$T2" python3 bench/compare_trees.py --tree new=. \
    --tree "old=${OLD:?OLD: an older checkout}" --models "${MODELS:-resnet50,bert_layer}" \
    --batches "${B:-1}" --precisions fp16,int8 --rounds "${R:-7}" --repeat 30 --calib 1 \
    --jobs 12 > "$OUT/compare/log" 2>&1
  echo "compare rc=$? in $(( $(date +%s) - t0 )) s"
  tail -30 "$OUT/compare/log"
fi
if [ "${TUNE:-0}" != 0 ]; then
  mkdir -p "$OUT/tune"
  OUT="$OUT/tune" timeout -s INT -k 20 "${T3:-540}" python3 bench/gpu.py --precisions fp16 \
    --models "${M:-resnet50,bert_layer}" --batches "${B:-1}" --tuning fast \
    --timing-cache "$OUT/tune/timing.json" --budget $(( ${T3:-540} - 30 )) > "$OUT/tune/log" 2>&1
  echo "tuning bench rc=$?"
  tail -40 "$OUT/tune/log"
fi
