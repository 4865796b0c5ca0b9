"""Guards around ONNX's own C++ (checker and shape inference) for untrusted models.

``onnx.checker`` accepts some models on which ``onnx.shape_inference`` then aborts or
segfaults the process (a C++ assertion, an out-of-bounds read): a ``Split`` with two outputs
and ``num_outputs=1`` is one (SIGABRT in ``std::vector::operator[]``). A crash cannot be caught,
so ptxc does two things:

1. **A validation pre-pass** (:func:`validate_for_inference`, always on, linear in the node
   count): it refuses, with a :class:`~ptxc.errors.ModelError` naming the node, what the C++
   is known to assert on: output counts that disagree with ``num_outputs``/``split``, axis
   attributes beyond any rank ptxc supports (``|axis| > MAX_RANK``, e.g. ``axis=2**31``), and
   integer attributes beyond 64 bits' worth of sense (a dimension count or size above
   ``MAX_DIM``). Each crash the fuzzing suite (``tests/fuzz``) finds becomes a rule here and a
   regression test.
2. **Isolation** (:func:`infer_shapes_isolated`, opt-in: ``import_onnx(..., isolate=True)`` or
   ``PTXC_ISOLATE_IMPORT=1``): the checker and shape inference run in a child Python process
   that imports only onnx; a crash or a hang (``timeout``) there is a ModelError here. It costs
   a process start and two serializations of the model (about half a second for a small model),
   so it is for services that import models from untrusted sources, not the default.
"""

from __future__ import annotations

import os
import subprocess
import sys

import onnx

from ..errors import ModelError

#: the largest tensor rank ptxc accepts; an axis attribute beyond it is refused before ONNX's
#: shape inference sees it
MAX_RANK = 64
#: the largest value of a size-like integer attribute (a kernel size, a count): 2**31 - 1
MAX_DIM = 2**31 - 1

_AXIS_ATTRS = ("axis", "axes")
_SIZE_ATTRS = ("num_outputs", "size", "group", "blocksize", "k")


def _where(node: onnx.NodeProto, i: int, source: str) -> str:
    return f"{source}: node {node.name or node.op_type + '_' + str(i)!r} ({node.op_type})"


def validate_for_inference(model: onnx.ModelProto, source: str) -> None:
    """Refuse what ONNX's shape inference is known to crash on (see the module docstring)."""
    def graphs(g):
        yield g
        for n in g.node:
            for a in n.attribute:
                if a.type == onnx.AttributeProto.GRAPH:
                    yield from graphs(a.g)
                elif a.type == onnx.AttributeProto.GRAPHS:
                    for sub in a.graphs:
                        yield from graphs(sub)

    for g in graphs(model.graph):
        for i, n in enumerate(g.node):
            _validate_node(n, _where(n, i, source))


def _validate_node(n: onnx.NodeProto, where: str) -> None:
    attrs = {a.name: a for a in n.attribute}
    for name in _AXIS_ATTRS:
        a = attrs.get(name)
        if a is None:
            continue
        vals = [a.i] if a.type == onnx.AttributeProto.INT else list(a.ints)
        bad = [v for v in vals if not -MAX_RANK <= v <= MAX_RANK]
        if bad:
            raise ModelError(f"{where}: attribute {name}={bad[0]} is beyond any tensor rank "
                             f"(ptxc supports ranks up to {MAX_RANK})")
    for name in _SIZE_ATTRS:
        a = attrs.get(name)
        if a is not None and a.type == onnx.AttributeProto.INT and not -MAX_DIM <= a.i <= MAX_DIM:
            raise ModelError(f"{where}: attribute {name}={a.i} is out of range "
                             f"[{-MAX_DIM}, {MAX_DIM}]")
    if n.op_type == "Split" and n.domain in ("", "ai.onnx"):
        outs = len(n.output)
        if "num_outputs" in attrs and attrs["num_outputs"].i != outs:
            raise ModelError(f"{where}: num_outputs={attrs['num_outputs'].i} but the node has "
                             f"{outs} outputs")
        if "num_outputs" in attrs and attrs["num_outputs"].i < 1:
            raise ModelError(f"{where}: num_outputs={attrs['num_outputs'].i} must be >= 1")
        if "split" in attrs and len(attrs["split"].ints) != outs:
            raise ModelError(f"{where}: split has {len(attrs['split'].ints)} entries but the "
                             f"node has {outs} outputs")


_CHILD = r"""
import sys, onnx
data = sys.stdin.buffer.read()
m = onnx.ModelProto()
m.ParseFromString(data)
try:
    onnx.checker.check_model(m)
except Exception as e:
    sys.stdout.buffer.write(b"C" + str(e).strip().splitlines()[0].encode()[:500])
    sys.exit(0)
try:
    m = onnx.shape_inference.infer_shapes(m, strict_mode=True)
except Exception as e:
    sys.stdout.buffer.write(b"S" + str(e).strip().splitlines()[0].encode()[:500])
    sys.exit(0)
sys.stdout.buffer.write(b"K" + m.SerializeToString())
"""


def isolation_requested(isolate: bool | None) -> bool:
    if isolate is not None:
        return bool(isolate)
    return os.environ.get("PTXC_ISOLATE_IMPORT", "") not in ("", "0")


def infer_shapes_isolated(model: onnx.ModelProto, source: str,
                          timeout: float = 120.0) -> onnx.ModelProto:
    """The ONNX checker and strict shape inference in a child process; a crash, a hang or a
    failure there is a ModelError here."""
    try:
        data = model.SerializeToString()
    except Exception as e:  # noqa: BLE001  (protobuf: a model over 2 GiB, ...)
        raise ModelError(f"{source}: the model cannot be serialized for isolated shape "
                         f"inference ({type(e).__name__}: {e})") from None
    try:
        r = subprocess.run([sys.executable, "-I", "-c", _CHILD], input=data,
                           capture_output=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise ModelError(f"{source}: ONNX shape inference did not finish in {timeout:g} s "
                         "(isolated; the model is refused)") from None
    if r.returncode != 0:
        why = (f"signal {-r.returncode}" if r.returncode < 0 else f"exit status {r.returncode}")
        tail = r.stderr.decode(errors="replace").strip().splitlines()[-1:] or [""]
        raise ModelError(f"{source}: ONNX shape inference crashed ({why}; isolated, so this "
                         f"process goes on): {tail[0][:300]}")
    kind, body = r.stdout[:1], r.stdout[1:]
    if kind == b"C":
        raise ModelError(f"{source}: ONNX checker: {body.decode(errors='replace')}")
    if kind == b"S":
        raise ModelError(f"{source}: ONNX shape inference: {body.decode(errors='replace')}")
    out = onnx.ModelProto()
    try:
        out.ParseFromString(body)
    except Exception:  # noqa: BLE001
        raise ModelError(f"{source}: isolated shape inference returned no model") from None
    return out
