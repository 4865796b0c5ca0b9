"""The gpu dialect's tensor-core ops (gpu.mma, gpu.ldmatrix, gpu.cp_async): hand-written warp
kernels whose fragment indexing is written here from the PTX ISA's tables (independently of the
dialect's layout code), run by the lockstep interpreter against numpy's matmul, lowered to PTX
that ptxas assembles, and (``gpu`` marker) run on the GPU to the interpreter's answer.

Each kernel runs ``WARPS`` warps in each of ``BLOCKS`` blocks; warp ``w`` of block ``b``
multiplies the matrices of batch ``b * WARPS + w``, so the lane and warp bookkeeping is exercised.
"""

import numpy as np
import pytest

from ptxc.dialects import gpu
from ptxc.dialects.loop import run_main
from ptxc.errors import CompileError, VerifyError
from ptxc.ir.types import F16, F32, I1, I8, I32, INDEX, BufferType
from ptxc.lower.loop_to_llvm import lower_loop_to_llvm
from ptxc.ptx import assemble, ptxas_path
from ptxc.codegen import lower_to_ptx
from test_loop_dialect import c, load, module, op, store

needs_ptxas = pytest.mark.skipif(ptxas_path() is None,
                                 reason="ptxas (CUDA toolkit) is not installed on this machine")
BLOCKS, WARPS = 2, 2
BATCH = BLOCKS * WARPS


def ix(b, v):
    return c(b, v, INDEX)


def add(b, x, y):
    return op(b, "arith.add", x, y if not isinstance(y, int) else ix(b, y))


def mul(b, x, k):
    return op(b, "arith.mul", x, ix(b, k))


def div(b, x, k):
    return op(b, "arith.div", x, ix(b, k))


def ids(b):
    """(batch, lane, groupID, threadID_in_group) of this thread."""
    t = gpu.thread_id(b, 0)
    warp, = [div(b, t, 32)]
    lane = op(b, "arith.sub", t, mul(b, warp, 32))
    batch = add(b, mul(b, gpu.block_id(b, 0), WARPS), warp)
    g = div(b, lane, 4)
    return batch, lane, g, op(b, "arith.sub", lane, mul(b, g, 4))


#: (operand element, accumulator, m, n, k, |a|, |b|)
SHAPES = {"m16n8k16": (F16, F32, 16, 8, 16, 8, 4),
          "m16n8k8": (F32, F32, 16, 8, 8, 4, 2),
          "m16n8k32": (I8, I32, 16, 8, 32, 16, 8)}


def a_pos(shape, i):
    """(row term: 0 or 8, col as (t-multiplier, constant)) of A fragment element i (PTX ISA)."""
    if shape == "m16n8k16":   # rows g / g+8 by pairs; cols 2t + (i&1), +8 for i >= 4
        return (8 if i in (2, 3, 6, 7) else 0), (2, (i & 1) + (8 if i >= 4 else 0))
    if shape == "m16n8k8":    # a0: (g, t), a1: (g+8, t), a2: (g, t+4), a3: (g+8, t+4)
        return (8 if i in (1, 3) else 0), (1, 4 if i >= 2 else 0)
    # m16n8k32: a0-3 (g, 4t+i), a4-7 (g+8, 4t+i-4), a8-11 (g, 16+4t+..), a12-15 (g+8, 16+..)
    return (8 if (i // 4) % 2 else 0), (4, i % 4 + (16 if i >= 8 else 0))


def b_pos(shape, i):
    """(row = k as (t-multiplier, constant)) of B fragment element i; its col is g."""
    if shape == "m16n8k16":   # b0,b1: k = 2t + i, b2,b3: k = 2t + i - 2 + 8
        return 2, (i & 1) + (8 if i >= 2 else 0)
    if shape == "m16n8k8":    # b0: k = t, b1: k = t + 4
        return 1, 4 * i
    return 4, i % 4 + (16 if i >= 4 else 0)   # m16n8k32: b0-3 k = 4t + i, b4-7 k = 16 + ..


def c_pos(i):
    """(row term, col constant) of C/D element i: (g + 8*(i>=2), 2t + (i&1))."""
    return (8 if i >= 2 else 0), i & 1


def mma_kernel(shape):
    """D[batch] = A[batch] @ B[batch] + C[batch], fragments loaded straight from global memory."""
    el, acc, M, N, K, na, nb = SHAPES[shape]
    ta, tb = BufferType((BATCH, M, K), el), BufferType((BATCH, K, N), el)
    tc = BufferType((BATCH, M, N), acc)

    def body(b, A, B, C, D):
        _, k = gpu.launch_op(b, (BLOCKS, 1, 1), (32 * WARPS, 1, 1), "handmade")
        batch, _, g, t = ids(k)
        a = []
        for i in range(na):
            r, (tm, cc) = a_pos(shape, i)
            a.append(load(k, A, batch, add(k, g, r), add(k, mul(k, t, tm), cc)))
        bv = []
        for i in range(nb):
            tm, cc = b_pos(shape, i)
            bv.append(load(k, B, batch, add(k, mul(k, t, tm), cc), g))
        cv = []
        for i in range(4):
            r, cc = c_pos(i)
            cv.append(load(k, C, batch, add(k, g, r), add(k, mul(k, t, 2), cc)))
        d = k.create("gpu.mma", [a, bv, cv], {"shape": shape}).results
        for i in range(4):
            r, cc = c_pos(i)
            store(k, d[i], D, batch, add(k, g, r), add(k, mul(k, t, 2), cc))
    m = module({"A": ta, "B": tb, "C": tc, "D": tc}, ["D"], body)
    rng = np.random.default_rng(0)
    if el == I8:
        inputs = {"A": rng.integers(-128, 128, ta.shape).astype(np.int8),
                  "B": rng.integers(-128, 128, tb.shape).astype(np.int8),
                  "C": rng.integers(-1000, 1000, tc.shape).astype(np.int32)}
    else:
        inputs = {"A": rng.standard_normal(ta.shape).astype(el.np_dtype),
                  "B": rng.standard_normal(tb.shape).astype(el.np_dtype),
                  "C": rng.standard_normal(tc.shape).astype(np.float32)}
    return m, inputs


def tf32(x):
    return (np.asarray(x, np.float32).view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32)


def reference(shape, inputs):
    A, B, C = (inputs[k].astype(np.float64) for k in "ABC")
    if shape == "m16n8k8":
        A, B = tf32(inputs["A"]).astype(np.float64), tf32(inputs["B"]).astype(np.float64)
    D = A @ B + C
    return D.astype(np.int64).astype(np.int32) if shape == "m16n8k32" else D.astype(np.float32)


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_mma_matches_numpy(shape):
    m, inputs = mma_kernel(shape)
    got = run_main(m, inputs)["D"]
    want = reference(shape, inputs)
    if shape == "m16n8k32":
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-5)


def test_tf32_mma_reads_only_the_top_19_bits():
    m, inputs = mma_kernel("m16n8k8")
    inputs["A"] = (inputs["A"].view(np.uint32) | np.uint32(0x1FFF)).view(np.float32)
    got = run_main(m, inputs)["D"]
    np.testing.assert_allclose(got, reference("m16n8k8", inputs), rtol=1e-6, atol=1e-5)
    assert not np.allclose(got, np.matmul(inputs["A"].astype(np.float64), inputs["B"])
                           + inputs["C"], rtol=1e-7, atol=0)


def staged_kernel(trans_b: bool):
    """The m16n8k16 product again, but staged: A (16x16) and B copied into shared memory by
    16-byte cp.asyncs (rows padded to 24 elements), then read with ldmatrix.x4 (A) and
    ldmatrix.x2 (B; stored n-major [8][16], or k-major [16][8] read with .trans)."""
    M, N, K = 16, 8, 16
    ta = BufferType((BATCH, M, K), F16)
    tb = BufferType((BATCH, K, N) if trans_b else (BATCH, N, K), F16)
    tc = BufferType((BATCH, M, N), F32)

    def body(b, A, B, D):
        _, k = gpu.launch_op(b, (BLOCKS, 1, 1), (32 * WARPS, 1, 1), "handmade")
        sA = gpu.shared(k, (WARPS, 16, 24), F16)
        sB = gpu.shared(k, (WARPS, 16, 24), F16)
        batch, lane, g, t = ids(k)
        warp = div(k, gpu.thread_id(k, 0), 32)
        yes = c(k, True, I1)
        # A: 16 rows x 2 chunks of 8 = 32 chunks, one per lane
        row, half = div(k, lane, 2), None
        half = mul(k, op(k, "arith.sub", lane, mul(k, row, 2)), 8)
        k.create("gpu.cp_async", [A, [batch, row, half], sA, [warp, row, half], yes],
                 {"bytes": 16})
        # B: 8 x 2 chunks (n-major) or 16 x 1 chunk (k-major); lanes past the end copy nothing
        # (pred false writes zeros, into the pad columns)
        if trans_b:
            brow = op(k, "arith.min", lane, ix(k, 15))
            live = op(k, "arith.cmp", lane, ix(k, 16), predicate="lt")
            k.create("gpu.cp_async", [B, [batch, brow, ix(k, 0)], sB,
                                      [warp, brow, op(k, "arith.select", live, ix(k, 0),
                                                      ix(k, 8))], live], {"bytes": 16})
        else:
            brow = op(k, "arith.min", div(k, lane, 2), ix(k, 7))
            live = op(k, "arith.cmp", lane, ix(k, 16), predicate="lt")
            bh = mul(k, op(k, "arith.sub", lane, mul(k, div(k, lane, 2), 2)), 8)
            k.create("gpu.cp_async", [B, [batch, brow, bh], sB,
                                      [warp, op(k, "arith.select", live, brow, ix(k, 8)),
                                       op(k, "arith.select", live, bh, ix(k, 16))], live],
                     {"bytes": 16})
        k.create("gpu.cp_async_commit", [])
        k.create("gpu.cp_async_wait", [], {"pending": 0})
        gpu.barrier(k)
        # ldmatrix.x4 for A: lane l gives row (l % 8) + 8 * ((l / 8) % 2), col 8 * (l / 16)
        q = div(k, lane, 8)
        arow = add(k, op(k, "arith.sub", lane, mul(k, q, 8)),
                   mul(k, op(k, "arith.sub", q, mul(k, div(k, q, 2), 2)), 8))
        acol = mul(k, div(k, lane, 16), 8)
        a = k.create("gpu.ldmatrix", [sA, [warp, arow, acol]], {"num": 4}).results
        # ldmatrix.x2 for B: lanes 0-15 give the rows; matrix 0 is k 0-7, matrix 1 k 8-15
        l16 = op(k, "arith.sub", lane, mul(k, div(k, lane, 16), 16))
        if trans_b:   # rows are k: lane l (< 16) gives row k = l
            bv = k.create("gpu.ldmatrix", [sB, [warp, l16, ix(k, 0)]],
                          {"num": 2, "trans": True}).results
        else:         # rows are n: lane l gives row n = l % 8, col k = 8 * (l / 8)
            n8 = op(k, "arith.sub", l16, mul(k, div(k, l16, 8), 8))
            bv = k.create("gpu.ldmatrix", [sB, [warp, n8, mul(k, div(k, l16, 8), 8)]],
                          {"num": 2}).results
        zero = c(k, 0.0, F32)
        d = k.create("gpu.mma", [list(a), list(bv), [zero] * 4], {"shape": "m16n8k16"}).results
        for i in range(4):
            r, cc = c_pos(i)
            store(k, d[i], D, batch, add(k, g, r), add(k, mul(k, t, 2), cc))
    m = module({"A": ta, "B": tb, "D": tc}, ["D"], body)
    rng = np.random.default_rng(1)
    inputs = {"A": rng.standard_normal(ta.shape).astype(np.float16),
              "B": rng.standard_normal(tb.shape).astype(np.float16)}
    bk = inputs["B"] if trans_b else inputs["B"].transpose(0, 2, 1)
    want = (inputs["A"].astype(np.float64) @ bk.astype(np.float64)).astype(np.float32)
    return m, inputs, want


@pytest.mark.parametrize("trans_b", [False, True], ids=["b_n_major", "b_k_major_trans"])
def test_cp_async_and_ldmatrix_feed_mma(trans_b):
    m, inputs, want = staged_kernel(trans_b)
    got = run_main(m, inputs)["D"]
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-5)


def test_warp_ops_refuse_a_block_that_is_not_whole_warps():
    m, inputs = mma_kernel("m16n8k16")
    launch = next(o for o in m.walk() if o.name == "gpu.launch")
    launch.attributes["block"] = (48, 1, 1)
    with pytest.raises(CompileError, match=r"\[32k, 1, 1\]"):
        run_main(m, inputs)


def test_mma_verifier_names_the_bad_fragment():
    m, _ = mma_kernel("m16n8k16")
    mma = next(o for o in m.walk() if o.name == "gpu.mma")
    mma.attributes["shape"] = "m16n8k8"
    from ptxc.ir import verify
    with pytest.raises(VerifyError, match="m16n8k8 takes 4 a values, has 8"):
        verify(m)


def test_cp_async_refuses_misaligned_addresses():
    m, inputs, _ = staged_kernel(False)
    cp = next(o for o in m.walk() if o.name == "gpu.cp_async")
    # shift the destination column by one element: 2-byte aligned, not 16
    b = __import__("ptxc.ir", fromlist=["Builder"]).Builder.before_op(cp)
    col = cp.operands[7]   # A, its 3 indices, sA, warp, row, *col*, pred
    cp.set_operand(7, op(b, "arith.add", col, ix(b, 1)))
    with pytest.raises(CompileError, match="not 16-byte aligned"):
        run_main(m, inputs)


CASES = {**{f"mma_{s}": (lambda s=s: mma_kernel(s)) for s in SHAPES},
         "staged_n_major": lambda: staged_kernel(False)[:2],
         "staged_k_major": lambda: staged_kernel(True)[:2]}


@pytest.mark.parametrize("case", sorted(CASES))
def test_emits_the_intrinsics(case):
    m, _ = CASES[case]()
    text = lower_loop_to_llvm(m, target="nvptx").text
    assert "llvm.nvvm.mma.m16n8k" in text
    if case.startswith("staged"):
        assert "llvm.nvvm.ldmatrix.sync.aligned.m8n8.x4.b16.p3" in text
        assert "llvm.nvvm.cp.async.cg.shared.global.16.s" in text
        assert "llvm.nvvm.cp.async.wait.group" in text


@needs_ptxas
@pytest.mark.parametrize("case", sorted(CASES))
def test_assembles(case):
    m, _ = CASES[case]()
    p = lower_to_ptx(m, arch="sm_90")
    assert "mma.sync.aligned.m16n8k" in p.ptx
    rep = assemble(p.ptx, "sm_90")
    (r,) = rep.kernels.values()
    assert r.spill_stores == 0


@pytest.mark.gpu
@pytest.mark.parametrize("case", sorted(CASES))
def test_on_gpu_gives_the_interpreters_answer(case):
    from test_ptx import run_on_gpu
    m, inputs = CASES[case]()
    want = run_main(m, inputs)
    got = run_on_gpu(lower_to_ptx(m), inputs)
    for k in want:
        if want[k].dtype.kind == "i":
            np.testing.assert_array_equal(got[k], want[k])
        else:   # the tensor core sums in another order than numpy's f64
            np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-5)
