"""The tuner drops a cuda candidate that spills registers before timing it (ptxas's report, no
GPU needed): a real fp16 GEMM, its default tactic and one that forces a 128x128 tile under a
register budget of four blocks per SM (which cannot hold its accumulators)."""

import pytest

from ptxc.ir.printer import print_ir
from ptxc.lower.gpu_map import MapToGpu
from ptxc.ptx import ptxas_path
from ptxc.tactic.kernels import kernels_of
from ptxc.tactic.tactic import DEFAULT, Tactic
from ptxc.target import Target
from ptxc.tune.measure import build_candidate, spill_reason
from ptxc.tune.tuner import _pass_text, tune_kernel

from support.contraction_ir import matmul_model

pytestmark = pytest.mark.skipif(ptxas_path() is None, reason="needs ptxas")

SM90 = Target.preset("sm_90")
SPILLER = Tactic("mma", {"mma_tiles": ("128x128x2x2",), "mma_min_blocks": 4})


def _gemm():
    from ptxc.frontend.load import as_module
    from ptxc.pipeline import run_stages
    m = as_module(matmul_model(M=256, K=256, N=256, trans_b=True))
    run_stages(m, "loop", target="cuda", arch="sm_90", precision="fp16",
               stage_passes={"loop": "lower-tensor-to-loop"}, progress=None)
    return max(kernels_of(m), key=lambda k: len(list(k.op.walk())))


def test_a_spilling_candidate_is_named_and_the_default_is_not():
    k = _gemm()
    text, pass_text = print_ir(k.module), _pass_text(MapToGpu(target=SM90))
    base = build_candidate(text, k.key, pass_text, SM90.to_dict(), DEFAULT.to_json())
    spiller = build_candidate(text, k.key, pass_text, SM90.to_dict(), SPILLER.to_json())
    assert spill_reason(base) is None
    why = spill_reason(spiller)
    assert why is not None and why.startswith("spills ") and "bytes (" in why


def test_tune_kernel_rejects_it_before_any_run():
    k = _gemm()
    ran = []

    def timer(tactic, bench, inputs, runs):
        ran.append(str(tactic))
        return [1.0] * runs
    # no GPU here: the candidates that reach a run fail to load (the default too), so the
    # choice itself fails; what matters is the spiller's reason, given before any run
    import ptxc.tune.tuner as tuner
    seen = {}
    real_choose = tuner.choose

    def spy(measured, margin=tuner.MARGIN):
        seen["m"] = measured
        return measured[0]
    tuner.choose = spy
    try:
        res = tune_kernel(print_ir(k.module), k.key, _pass_text(MapToGpu(target=SM90)),
                          SM90.to_dict(), [DEFAULT.to_json(), SPILLER.to_json()], 3,
                          timer=timer)
    finally:
        tuner.choose = real_choose
    m = seen["m"][1]
    assert m.tactic == SPILLER and m.error.startswith("spills ")
    assert str(SPILLER) not in ran
    assert any(r.startswith(f"{SPILLER}: spills") for r in res["rejected"])


@pytest.fixture(scope="module")
def cached_compile(tmp_path_factory):
    """A cuda compile without the GPU given a timing cache with an entry for the GEMM: the
    engine, the log, the GEMM kernel and the cached tactic."""
    import logging

    import ptxc
    import ptxc.target as target_mod
    from ptxc.tune.cache import Entry, TimingCache
    model = matmul_model(M=256, K=256, N=256, trans_b=True)
    k = _gemm()
    cand = MapToGpu(target=SM90).candidates(k.op, "fast")[1]
    cache = TimingCache()
    cache.put(SM90, k.key, Entry(cand, 1e-5, 2e-5, 8, level="fast"))
    path = str(tmp_path_factory.mktemp("gemm") / "gemm.timing")
    cache.save(path)
    records = []

    class Keep(logging.Handler):
        def emit(self, record):
            records.append(record.getMessage())
    handler, logger = Keep(logging.INFO), logging.getLogger("ptxc.tune")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        with pytest.MonkeyPatch.context() as mp:   # no GPU here, also on the GPU machine
            mp.setattr(target_mod, "device_target", lambda: None)
            e = ptxc.compile(model, target="cuda", arch="sm_90", precision="fp16",
                             cache=False, tuning="fast", timing_cache=path)
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    return e, "\n".join(records), k, cand


def test_a_cuda_compile_without_a_gpu_takes_the_cache_and_the_heuristic(cached_compile):
    """No GPU to measure on: kernels with a cache entry take its tactic, the others the
    heuristic, and the log says how many of each and why."""
    e, log_text, k, cand = cached_compile
    rows = {r["key"]: r for r in e.tuning}
    assert rows[k.key]["source"] == "cache" and rows[k.key]["tactic"] == str(cand)
    assert {r["source"] for key, r in rows.items() if key != k.key} <= {"heuristic"}
    assert "no measurement" in log_text and "1 from the timing cache" in log_text
    assert any(kk.tactic == str(cand) for kk in e.kernels.kernels)


def test_a_cuda_plan_keeps_the_tuning_record_and_each_kernels_tactic(cached_compile, tmp_path):
    """The record travels with the plan (a cuda plan as a cpu one, tests/test_tune_cpu.py),
    with its non-default values (a ``cache`` row, its times): the header holds it as the
    engine has it, and ``ptxc inspect`` shows the row, its times and the kernel's tactic."""
    from ptxc.plan.inspect import inspect_plan
    from ptxc.plan.save import plan_to_bytes
    from test_plan import split
    e, _, k, cand = cached_compile
    data = plan_to_bytes(e)
    header, _ = split(data)
    assert header["tuning"] == e.tuning
    assert [kk["tactic"] for kk in header["kernel_table"]["kernels"]] == \
        [kk.tactic for kk in e.kernels.kernels]
    path = tmp_path / "gemm.plan"
    path.write_bytes(data)
    text = inspect_plan(path)
    assert f"tuning: {len(e.tuning)} distinct kernels" in text
    assert f"{k.key}  layer" in text and f"tactic {cand} [cache]  time 0.0100 ms  default " \
        "0.0200 ms (2.00x the default)" in text
