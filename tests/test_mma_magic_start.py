"""map-to-gpu's ``mma-magic-start`` (mma ``_Builder._magic_inits``): an s8 kernel's sums start
at ``start(n) + MAGIC_BITS`` (a bias plus the bits of llvm_scalar's MAGIC f32) instead of 0, so
that the staged epilogue reads ``start + sum`` as ``total - MAGIC_BITS``, a load the interpreter
checks against ``|total - center| <= bound``, and llvm_scalar takes ``total``'s bits as the f32
``MAGIC + start + sum``: the bias add and the int-to-float add of every output go. Where it
does not apply (fragment epilogue, split-K's partial sums, sums that may pass 2**22) nothing
changes.
"""

import numpy as np
import pytest

import int8_ir
import ptxc
from ptxc.dialects.loop import run_main
from ptxc.errors import CompileError, VerifyError
from ptxc.lower.llvm_scalar import MAGIC_BITS, _int_bound
from ptxc.ptx import lower_to_ptx
from ptxc.rewrite.pass_manager import PassManager

MAGIC_ON = "map-to-gpu{mma-epilogue=staged mma-magic-start=true}"

GEMMS = {
    "residual": dict(M=128, K=96, N=64, residual=True),
    "edges_zx_residual": dict(M=130, K=96, N=72, zx=7, residual=True),   # M and N overhang
    "k256": dict(M=64, K=256, N=48),
}


def _mapped(model, pipeline):
    m = int8_ir.loop_module(model)
    PassManager(pipeline).run(m)
    return m


def _centered_loads(m):
    return [o for o in m.walk() if o.name == "loop.load" and "center" in o.attributes]


@pytest.mark.parametrize("case", sorted(GEMMS))
def test_magic_started_sums_are_exact(case):
    """The mapped kernel equals the graph interpreter bit for bit (every staged load checked
    against its bound around MAGIC_BITS), and its PTX adds fewer integers: no per-output bias
    add, no conversion."""
    model = int8_ir.gemm_model(**GEMMS[case])
    x = int8_ir.inputs_for(model)
    want = ptxc.interpret(ptxc.import_onnx(model), x)["y"]
    plain = _mapped(model, "map-to-gpu{mma-epilogue=staged}")
    magic = _mapped(model, MAGIC_ON)
    loads = _centered_loads(magic)
    assert loads and {o.attributes["center"] for o in loads} == {MAGIC_BITS}
    np.testing.assert_array_equal(run_main(magic, x)["y"], want)
    a, b = (lower_to_ptx(m, arch="sm_90").ptx for m in (plain, magic))
    assert "cvt.rn.f32.s32" not in b
    assert b.count("add.s32") < a.count("add.s32")


def test_not_where_it_does_not_apply():
    """The fragment epilogue (no bounded loads) and sums that may reach 2**22 (K = 2048
    random weights) keep sums that start at 0."""
    small, large = int8_ir.gemm_model(64, 96, 48), int8_ir.gemm_model(64, 2048, 48)
    for model, pipeline in [
            (small, "map-to-gpu{mma-epilogue=fragment mma-magic-start=true}"),
            (large, MAGIC_ON)]:
        assert not _centered_loads(_mapped(model, pipeline))


def test_the_interpreter_checks_the_bound_around_the_center():
    model = int8_ir.gemm_model(**GEMMS["residual"])
    m = _mapped(model, MAGIC_ON)
    for o in _centered_loads(m):
        o.attributes["bound"] = 10
    with pytest.raises(CompileError, match="from 1262485504, over the load's bound 10"):
        run_main(m, int8_ir.inputs_for(model))


def test_a_center_needs_a_bound():
    from ptxc.ir.verifier import verify
    m = _mapped(int8_ir.gemm_model(**GEMMS["residual"]), MAGIC_ON)
    (load, *_) = _centered_loads(m)
    del load.attributes["bound"]
    with pytest.raises(VerifyError, match="center needs a bound"):
        verify(m)


def test_the_bound_of_a_centered_load_minus_its_center():
    m = _mapped(int8_ir.gemm_model(**GEMMS["residual"]), MAGIC_ON)
    (load, *_) = _centered_loads(m)
    sub = next(u for u in load.results[0].users if u.name == "arith.sub")
    assert _int_bound(sub.results[0]) == load.attributes["bound"] < 1 << 22
    assert _int_bound(load.results[0]) == load.attributes["bound"] + MAGIC_BITS
