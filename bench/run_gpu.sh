#!/usr/bin/env bash
# The one device-machine call: what the GPU machine has, the GPU test suite, the CPU-side checks
# of the cuda target that want a real ptxas and device, and the GPU benchmark; everything also
# written under $OUT (default ./bench_out), at most 7 files:
#
#   run_gpu.log     this script's own output (machine, versions, each stage's exit status)
#   gpu_tests.log   pytest -m gpu (the ONNX backend suite on cuda, light models, the engine)
#   gpu_tests.xml   the same as JUnit XML
#   cpu_checks.log  the cuda target's CPU tests (PTX, ptxas, map-to-gpu, plans) on that machine
#   bench.log       bench/gpu.py's output; bench.json and bench.md are its results
#
# Usage, from the repository root on the GPU machine (no installs; everything is there):
#
#   bash bench/run_gpu.sh [all|tests|bench]        # default: all
#
# Time limits (seconds, environment; defaults for all / tests / bench): GPU_TESTS_TIMEOUT
# (230 / 420 / -) for the GPU suite, GPU_TEST_TIMEOUT (180) per test, CPU_CHECKS_TIMEOUT
# (50 / 120 / -), BENCH_TIMEOUT (280 / - / 540) for the benchmark (its own budget is 30 s less).
# `all` fits one 10-minute device call (timeout_s 600); `tests` and `bench` each fit one call
# with more time for each. GPU_TEST_WORKERS (default 8) pytest-xdist workers share the GPU.
# The exit status is the GPU suite's (0 when all passed; 0 for `bench`).
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-./bench_out}
mkdir -p "$OUT"
export OUT PYTHONPATH=.${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
# compile times are measured: no compile cache (ptxc.plan.cache) unless asked for
export PTXC_CACHE=${PTXC_CACHE:-0}
PY=${PYTHON:-python3}
WHAT=${1:-all}
case "$WHAT" in
  all) d_tests=230 d_cpu=50 d_bench=280 ;;
  tests) d_tests=420 d_cpu=120 d_bench=0 ;;
  bench) d_tests=0 d_cpu=0 d_bench=540 ;;
  *) echo "usage: bash bench/run_gpu.sh [all|tests|bench]" >&2; exit 2 ;;
esac
GPU_TESTS_TIMEOUT=${GPU_TESTS_TIMEOUT:-$d_tests}
GPU_TEST_TIMEOUT=${GPU_TEST_TIMEOUT:-180}
GPU_TEST_WORKERS=${GPU_TEST_WORKERS:-8}
CPU_CHECKS_TIMEOUT=${CPU_CHECKS_TIMEOUT:-$d_cpu}
BENCH_TIMEOUT=${BENCH_TIMEOUT:-$d_bench}
LOG="$OUT/run_gpu.log"
: >"$LOG"
say() { echo "$@" | tee -a "$LOG"; }
tests_rc=skipped cpu_rc=skipped bench_rc=skipped

say "== run_gpu.sh $WHAT, $(date -u '+%Y-%m-%d %H:%M:%S') UTC, commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
{
  nvidia-smi -L
  nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used,clocks.sm --format=csv
  command -v ptxas && ptxas --version | tail -1
  "$PY" - <<'EOF'
import importlib.metadata as md, platform, sys
print("python", platform.python_version(), sys.executable)
for p in ("numpy", "onnx", "onnxruntime", "llvmlite", "numba", "numba-cuda", "cuda-core",
          "cuda-bindings", "cuda-pathfinder", "torch", "torchvision", "pytest", "pytest-xdist",
          "pytest-timeout", "hypothesis"):
    try:
        print(f"  {p} {md.version(p)}")
    except md.PackageNotFoundError:
        print(f"  {p} MISSING")
try:
    from numba import cuda
    dev = cuda.get_current_device()
    free, total = cuda.current_context().get_memory_info()
    print(f"numba.cuda: {dev.name.decode() if isinstance(dev.name, bytes) else dev.name}, "
          f"sm_{dev.compute_capability[0]}{dev.compute_capability[1]}, "
          f"{free / 2**30:.1f} of {total / 2**30:.1f} GiB free")
except Exception as e:
    print(f"numba.cuda: NOT USABLE ({type(e).__name__}: {e})")
try:
    import ptxc.ptx
    print("ptxc default arch", ptxc.ptx.default_arch(), "ptxas", ptxc.ptx.ptxas_path())
except Exception as e:
    print(f"ptxc.ptx: {type(e).__name__}: {e}")
EOF
} 2>&1 | tee -a "$LOG"

if [ "$WHAT" = all ] || [ "$WHAT" = tests ]; then
  say ""
  say "== GPU tests: pytest -m gpu (-n $GPU_TEST_WORKERS, ${GPU_TEST_TIMEOUT}s a test, ${GPU_TESTS_TIMEOUT}s in all)"
  extra=()
  "$PY" -c "import pytest_timeout" 2>/dev/null &&
    extra+=(--timeout "$GPU_TEST_TIMEOUT" --timeout-method thread)
  "$PY" -c "import xdist" 2>/dev/null && [ "$GPU_TEST_WORKERS" != 0 ] &&
    extra+=(-n "$GPU_TEST_WORKERS")
  t0=$SECONDS
  # SIGINT first: pytest then stops, reports what ran and still writes the JUnit XML
  timeout -s INT -k 30 "$GPU_TESTS_TIMEOUT" "$PY" -m pytest -m gpu -q -p no:cacheprovider \
    -o addopts="" -rfEX ${extra[@]+"${extra[@]}"} --junitxml="$OUT/gpu_tests.xml" tests >"$OUT/gpu_tests.log" 2>&1
  tests_rc=$?
  say "GPU tests: exit $tests_rc in $((SECONDS - t0)) s; summary:"
  grep -E "^(FAILED|ERROR|XPASS)|Timeout|^=* ?[0-9]+ [a-z]+.* in [0-9.]+s" \
    "$OUT/gpu_tests.log" | tail -60 | tee -a "$LOG"

  say ""
  files=$(ls tests/test_ptx*.py tests/test_*cuda*.py tests/test_gpu*.py 2>/dev/null | sort -u)
  say "== CPU-side checks of the cuda target, real ptxas and device present (${CPU_CHECKS_TIMEOUT}s):" $files
  t0=$SECONDS
  timeout -s INT -k 15 "$CPU_CHECKS_TIMEOUT" "$PY" -m pytest -q -p no:cacheprovider -o addopts="" \
    -rfE -m "not gpu" $("$PY" -c "import xdist" 2>/dev/null && echo "-n 8") $files \
    >"$OUT/cpu_checks.log" 2>&1
  cpu_rc=$?
  say "CPU checks: exit $cpu_rc in $((SECONDS - t0)) s"
  grep -E "^(FAILED|ERROR)|^=* ?[0-9]+ [a-z]+.* in [0-9.]+s" \
    "$OUT/cpu_checks.log" | tail -30 | tee -a "$LOG"
fi

if [ "$WHAT" = all ] || [ "$WHAT" = bench ]; then
  say ""
  say "== GPU benchmark: bench/gpu.py (${BENCH_TIMEOUT}s)"
  t0=$SECONDS
  timeout -s INT -k 15 "$BENCH_TIMEOUT" "$PY" bench/gpu.py --budget $((BENCH_TIMEOUT - 30)) \
    >"$OUT/bench.log" 2>&1
  bench_rc=$?
  say "benchmark: exit $bench_rc in $((SECONDS - t0)) s"
  if [ -s "$OUT/bench.md" ]; then tee -a "$LOG" <"$OUT/bench.md"; else tail -40 "$OUT/bench.log" | tee -a "$LOG"; fi
fi

say ""
say "== done: GPU tests $tests_rc, CPU checks $cpu_rc, benchmark $bench_rc; files in $OUT: $(ls "$OUT" | tr '\n' ' ')"
[ "$tests_rc" = skipped ] && exit 0
exit "$tests_rc"
