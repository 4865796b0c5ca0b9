"""Loop modules holding reduced-precision contractions in the form the mma schedule takes
(ptxc/lower/gpu_map/contraction.py), made from small ONNX models with f16 inputs.

An ONNX model ``Cast(a: f16 -> f32)``, ``Cast(b)``, ``MatMul``, ``Add(bias)``, ``Relu`` lowers to
two cast nests writing f32 copies and a matmul nest reading them. :func:`fold_casts` folds each
cast-only nest into the loads that read its result (``load f32 copy`` becomes ``cast(load
f16)``), which is the contraction form: f16 storage, f32 products and sums (the matmul nest's
``contraction`` annotation then says f16, not f32). Used by the mma tests and bench/gemm.py.
"""

import attrs
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from ptxc.compiler import as_module, run_stages
from ptxc.dialects.func import func_body, functions
from ptxc.dialects.loop_contraction import ATTR, annotation, products, reduction_chain
from ptxc.ir.builder import Builder


def fold_casts(m):
    """Fold every top-level nest ``y[i..] = cast(x[perm(i..)])`` into the loads of ``y``; the nest and
    ``y``'s allocation go when nothing else reads ``y``."""
    for f in functions(m):
        for op in list(func_body(f).ops):
            if op.name != "loop.parallel":
                continue
            ops = [o for o in op.regions[0].blocks[0].ops if o.name != "arith.constant"]
            if [o.name for o in ops] != ["loop.load", "arith.cast", "loop.store", "loop.yield"]:
                continue
            ld, cs, st, _ = ops
            ivs = list(op.regions[0].blocks[0].args)
            iv_ids = {id(v) for v in ivs}

            def const_of(v):
                return v.owner.attr("value") if getattr(v.owner, "name", "") == \
                    "arith.constant" else None
            idx, sidx = list(ld.operands[1:]), list(st.operands[2:])
            if any(id(v) not in iv_ids and const_of(v) is None for v in idx + sidx):
                continue
            if {id(v) for v in idx if id(v) in iv_ids} != iv_ids or \
                    [id(v) for v in sidx if id(v) in iv_ids].__len__() != len(ivs):
                continue
            if tuple(op.attr("lower")) != (0,) * len(ivs):
                continue
            src, dst = ld.operands[0], st.operands[1]
            if dst.owner is None or dst.owner.name != "loop.alloc":
                continue
            upper = dict(zip(map(id, ivs), op.attr("upper")))
            if tuple(upper[id(i)] if id(i) in iv_ids else 1 for i in sidx) != dst.type.shape:
                continue
            at = {id(v): i for i, v in enumerate(sidx)}  # a transposing copy: st order
            for u in list(dst.uses):
                user = u.op
                if user is st or user.name != "loop.load":
                    continue
                b = Builder.before_op(user)
                uidx = list(user.operands[1:])
                new = [uidx[at[id(w)]] if id(w) in iv_ids else
                       b.create("arith.constant", [], {"value": const_of(w),
                                                        "type": w.type}).result for w in idx]
                v = b.create("loop.load", [src, new]).result
                v = b.create("arith.cast", [v], {"to": cs.results[0].type}).result
                user.results[0].replace_all_uses_with(v)
                user.erase()
            if [u.op for u in dst.uses] == [st]:
                op.erase()
                dst.owner.erase()
        for op in func_body(f).ops:
            _f16_kind(op)
    return m


def _f16_kind(op):
    """An f32 contraction nest whose factors are now f16 loads cast to f32 (both folded) is an
    f16 contraction: its annotation (ptxc/dialects/loop_contraction.py) says so, as the loop
    lowering of a matmul of f16 operands would."""
    ann = annotation(op) if op.name == "loop.parallel" else None
    if ann is None or ann.kind != "f32":
        return
    chain = reduction_chain(op, ann.k)
    if chain is not None and products(chain[1], "f16") is not None:
        op.attributes[ATTR] = attrs.evolve(ann, kind="f16").value


def matmul_model(M, K, N, batch=(), trans_b=False, bias=True, relu=True, seed=0):
    """``relu(cast(a) @ cast(b) + bias)`` with f16 inputs ``a`` [*batch, M, K] and ``b``
    [*batch, K, N] (or [*batch, N, K] transposed, ``trans_b``), f32 output."""
    rng = np.random.default_rng(seed)
    bshape = [*batch, N, K] if trans_b else [*batch, K, N]
    ins = [helper.make_tensor_value_info("a", TensorProto.FLOAT16, [*batch, M, K]),
           helper.make_tensor_value_info("b", TensorProto.FLOAT16, bshape)]
    nodes = [helper.make_node("Cast", ["a"], ["af"], to=TensorProto.FLOAT, name="cast_a"),
             helper.make_node("Cast", ["b"], ["bf"], to=TensorProto.FLOAT, name="cast_b")]
    b_in = "bf"
    if trans_b:
        perm = list(range(len(batch))) + [len(batch) + 1, len(batch)]
        nodes.append(helper.make_node("Transpose", ["bf"], ["bt"], perm=perm, name="tb"))
        b_in = "bt"
    nodes.append(helper.make_node("MatMul", ["af", b_in], ["t"], name="mm"))
    inits, last = [], "t"
    if bias:
        inits.append(numpy_helper.from_array(rng.standard_normal(N).astype(np.float32), "bias"))
        nodes.append(helper.make_node("Add", [last, "bias"], ["u"], name="add"))
        last = "u"
    if relu:
        nodes.append(helper.make_node("Relu", [last], ["y"], name="relu"))
    else:
        nodes.append(helper.make_node("Identity", [last], ["y"], name="out"))
    out = helper.make_tensor_value_info("y", TensorProto.FLOAT, [*batch, M, N])
    g = helper.make_graph(nodes, "g", ins, [out], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def conv_model(N, C, H, W, K, R, S, stride=1, pad=0, seed=0):
    """``relu(conv(cast(x), w) + b)`` with an f16 input x [N, C, H, W] and an f16 weight input
    w [K, C, R, S] (an input, so no constant folding takes the cast)."""
    rng = np.random.default_rng(seed)
    P = (H + 2 * pad - R) // stride + 1
    Q = (W + 2 * pad - S) // stride + 1
    ins = [helper.make_tensor_value_info("x", TensorProto.FLOAT16, [N, C, H, W]),
           helper.make_tensor_value_info("w", TensorProto.FLOAT16, [K, C, R, S])]
    nodes, xin = [], "x"
    inits = [numpy_helper.from_array(rng.standard_normal(K).astype(np.float32), "b")]
    if pad:   # padded in f16, as the precision pass pads f16 activations
        inits.append(numpy_helper.from_array(np.array([0, 0, pad, pad] * 2, np.int64), "pads"))
        nodes.append(helper.make_node("Pad", ["x", "pads"], ["xp"], name="pad"))
        xin = "xp"
    nodes += [helper.make_node("Cast", [xin], ["xf"], to=TensorProto.FLOAT, name="cast_x"),
              helper.make_node("Cast", ["w"], ["wf"], to=TensorProto.FLOAT, name="cast_w"),
              helper.make_node("Conv", ["xf", "wf", "b"], ["t"], name="conv",
                               strides=[stride, stride]),
              helper.make_node("Relu", ["t"], ["y"], name="relu")]
    out = helper.make_tensor_value_info("y", TensorProto.FLOAT, [N, K, P, Q])
    g = helper.make_graph(nodes, "g", ins, [out], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def loop_module(model):
    """The model at the loop stage (cpu pipeline, nothing mapped), casts folded."""
    m = as_module(model)
    run_stages(m, "loop")
    return fold_casts(m)


def normal(rng, shape, dt):
    return rng.standard_normal(shape).astype(dt)


def inputs_for(model, seed=1, draw=normal) -> dict:
    """Each graph input of ``model``: ``draw(rng, shape, numpy dtype)``, standard normal by
    default (int8_ir draws integers over the whole range)."""
    rng = np.random.default_rng(seed)
    out = {}
    for vi in model.graph.input:
        shape = [d.dim_value for d in vi.type.tensor_type.shape.dim]
        dt = onnx.helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type)
        out[vi.name] = draw(rng, shape, dt)
    return out
