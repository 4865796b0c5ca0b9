"""The ONNX importer: a model file or ModelProto becomes a graph-dialect module.

Steps, each failing with a typed error that names the file and the node:

1. load (``ModelError`` for unreadable or malformed files; external data must stay inside the
   model's folder: absolute paths, ``..`` and symlinks are refused; a ModelProto's external data
   needs ``base_dir=``, the same checks apply there);
2. ``onnx.checker`` and ``onnx.shape_inference`` (strict), behind a validation pre-pass of what
   ONNX's C++ crashes on, optionally in a child process (:mod:`ptxc.frontend.onnx_guard`);
3. opset: models of default-domain opset >= 7 are read natively (each converter knows the
   differences between opsets); older ones go through ``onnx.version_converter`` to opset 7;
4. every op type is checked against the converters first, and all unsupported ones are reported
   at once in one ``UnsupportedOpError``;
5. graph inputs (those without an initializer) become the arguments of ``main``; symbolic
   dimensions are bound from ``input_shapes``; ``constant_inputs`` turns inputs into constants;
   initializers become ``graph.constant``;
6. nodes are converted in order; ops that end up unused are dropped;
7. the declared output types are checked against the computed ones, and the module is verified.
"""

from __future__ import annotations

import os

import numpy as np
import onnx
from onnx import numpy_helper

from ..dialects.func import new_func, new_module, set_func_results
from ..errors import ModelError, UnsupportedOpError
from ..ir.builder import Builder
from ..ir.core import Operation
from ..ir.spec import lookup
from ..ir.types import TensorType
from ..ir.verifier import verify
from .convert.context import ONNX_TYPES, ConvertContext, MissingOutput, scalar_type_of
from .convert.table import converters

MIN_NATIVE_OPSET = 7


def supported_ops() -> tuple[str, ...]:
    """The ONNX op types (default domain) the importer accepts."""
    return tuple(sorted(converters()))


# ---- loading --------------------------------------------------------------------------------

def _check_external_data(model: onnx.ModelProto, base_dir: str, source: str) -> None:
    """Refuse external-data locations that leave the model's folder."""
    from onnx.external_data_helper import _get_all_tensors
    base = os.path.realpath(base_dir)
    for t in _get_all_tensors(model):
        if t.data_location != onnx.TensorProto.EXTERNAL:
            continue
        info = {e.key: e.value for e in t.external_data}
        loc = info.get("location", "")
        if not loc or os.path.isabs(loc) or loc.startswith(("/", "\\")) or ".." in \
                loc.replace("\\", "/").split("/"):
            raise ModelError(f"{source}: tensor {t.name!r}: external data location {loc!r} "
                             "must be a relative path inside the model's folder")
        path = os.path.join(base, loc)
        if os.path.islink(path) or os.path.realpath(path) != os.path.normpath(path):
            raise ModelError(f"{source}: tensor {t.name!r}: external data {loc!r} is a symlink "
                             "or leaves the model's folder")
        if not os.path.isfile(path):
            raise ModelError(f"{source}: tensor {t.name!r}: external data file {loc!r} not found")


def load_model(model, source: str | None = None,
               base_dir: str | os.PathLike | None = None) -> tuple[onnx.ModelProto, str]:
    """A ModelProto from a path, bytes or ModelProto; returns it and a name for messages.

    External data is read from the model file's folder, under the folder checks of
    :func:`_check_external_data`. A ModelProto or bytes have no folder: their external data is
    refused unless ``base_dir`` names one (then the same checks apply there), so a location is
    never resolved against the current directory."""
    from onnx.external_data_helper import uses_external_data, _get_all_tensors
    if isinstance(model, onnx.ModelProto):
        source = source or (model.graph.name or "model")
        if any(uses_external_data(t) for t in _get_all_tensors(model)):
            if base_dir is None:
                raise ModelError(f"{source}: the ModelProto has external data and no folder: "
                                 "pass base_dir= (the model's folder) to read it")
            proto = onnx.ModelProto()
            proto.CopyFrom(model)  # the caller's proto is not filled in
            _load_external(proto, os.fspath(base_dir), source)
            return proto, source
        return model, source
    if isinstance(model, (bytes, bytearray)):
        data, source = bytes(model), source or "<bytes>"
        base = None if base_dir is None else os.fspath(base_dir)
    elif isinstance(model, (str, os.PathLike)):
        path = os.fspath(model)
        source = source or path
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError as e:
            raise ModelError(f"{path}: cannot read model: {e.strerror or e}") from None
        base = os.path.dirname(os.path.abspath(path)) if base_dir is None else os.fspath(base_dir)
    else:
        raise ModelError(f"expected an ONNX path, bytes or ModelProto, got {type(model).__name__}")
    proto = onnx.ModelProto()
    try:
        proto.ParseFromString(data)
    except Exception as e:
        raise ModelError(f"{source}: not a valid ONNX model (protobuf parse failed: "
                         f"{type(e).__name__})") from None
    if not proto.HasField("graph") or (not proto.graph.node and not proto.graph.output):
        raise ModelError(f"{source}: not a valid ONNX model (no graph)")
    if any(uses_external_data(t) for t in _get_all_tensors(proto)):
        if base is None:
            raise ModelError(f"{source}: model has external data; load it from a path or "
                             "pass base_dir=")
        _load_external(proto, base, source)
    return proto, source


def _load_external(proto: onnx.ModelProto, base: str, source: str) -> None:
    _check_external_data(proto, base, source)
    try:
        onnx.external_data_helper.load_external_data_for_model(proto, base)
    except Exception as e:
        raise ModelError(f"{source}: cannot load external data: {e}") from None


def _default_opset(model: onnx.ModelProto) -> int:
    for o in model.opset_import:
        if o.domain in ("", "ai.onnx"):
            return o.version
    return 1


def prepare_model(model: onnx.ModelProto, source: str,
                  isolate: bool | None = None) -> onnx.ModelProto:
    """Checker, opset conversion and strict shape inference, behind the guards of
    :mod:`ptxc.frontend.onnx_guard` (a validation pre-pass; ``isolate``: in a child process)."""
    from .onnx_guard import infer_shapes_isolated, isolation_requested, validate_for_inference
    validate_for_inference(model, source)
    isolated = isolation_requested(isolate)
    if isolated and _default_opset(model) >= MIN_NATIVE_OPSET:
        return infer_shapes_isolated(model, source)
    try:
        onnx.checker.check_model(model)
    except Exception as e:
        raise ModelError(f"{source}: ONNX checker: {str(e).strip().splitlines()[0]}") from None
    opset = _default_opset(model)
    if opset < MIN_NATIVE_OPSET:
        from onnx import version_converter
        try:
            model = version_converter.convert_version(model, MIN_NATIVE_OPSET)
        except Exception as e:
            raise ModelError(f"{source}: opset {opset} could not be converted to "
                             f"{MIN_NATIVE_OPSET}: {str(e).strip()[:200]}") from None
        if isolated:
            return infer_shapes_isolated(model, source)
    try:
        model = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    except Exception as e:
        raise ModelError(f"{source}: ONNX shape inference: "
                         f"{str(e).strip().splitlines()[0][:300]}") from None
    return model


def check_supported(model: onnx.ModelProto, source: str) -> None:
    table = converters()
    missing: dict[str, list[str]] = {}
    for i, n in enumerate(model.graph.node):
        key = n.op_type if n.domain in ("", "ai.onnx") else f"{n.domain}::{n.op_type}"
        if n.domain not in ("", "ai.onnx") or n.op_type not in table:
            missing.setdefault(key, []).append(n.name or f"{n.op_type}_{i}")
    if missing:
        raise UnsupportedOpError(missing, source)


# ---- the import itself ------------------------------------------------------------------------

def _input_type(vi: onnx.ValueInfoProto, input_shapes: dict, source: str) -> TensorType:
    where = f"{source}: input {vi.name!r}"
    if not vi.type.HasField("tensor_type"):
        raise ModelError(f"{where}: only tensor inputs are supported")
    tt = vi.type.tensor_type
    el = scalar_type_of(tt.elem_type, where)
    given = input_shapes.get(vi.name)
    if not tt.HasField("shape"):
        if given is None:
            raise ModelError(f"{where} has no shape; give it with input_shapes={{{vi.name!r}: "
                             "(...)}")
        return TensorType(tuple(given), el)
    dims = []
    for k, d in enumerate(tt.shape.dim):
        if d.HasField("dim_value") and d.dim_value >= 0 and not d.HasField("dim_param"):
            dims.append(d.dim_value)
        elif given is not None and len(given) == len(tt.shape.dim):
            dims.append(int(given[k]))
        else:
            sym = d.dim_param or "?"
            raise ModelError(f"{where}: dimension {k} is symbolic ({sym!r}); bind it at compile "
                             f"time with input_shapes={{{vi.name!r}: (...)}}")
    if given is not None:
        if len(given) != len(dims) or any(
                d.HasField("dim_value") and not d.HasField("dim_param") and d.dim_value != g
                for d, g in zip(tt.shape.dim, given)):
            raise ModelError(f"{where}: input_shapes gives {list(given)}, the model declares "
                             f"{[d.dim_value or d.dim_param for d in tt.shape.dim]}")
    return TensorType(tuple(dims), el)


def import_onnx(model, input_shapes: dict | None = None, constant_inputs: dict | None = None,
                source: str | None = None, base_dir: str | os.PathLike | None = None,
                isolate: bool | None = None) -> Operation:
    """Import an ONNX model (path, bytes or ModelProto) as a graph-dialect module.

    ``input_shapes`` binds symbolic dimensions: ``{"input": (1, 3, 224, 224)}``.
    ``constant_inputs`` turns graph inputs into compile-time constants: ``{"shape": array}``
    (needed when an input decides a shape, as TensorRT's shape tensors).
    ``base_dir``: the folder of a ModelProto's (or bytes') external data; without it such a
    model is refused. ``isolate=True`` (or ``PTXC_ISOLATE_IMPORT=1``): run ONNX's checker and
    shape inference in a child process, so a crash there is a ModelError (see
    :mod:`ptxc.frontend.onnx_guard`).
    """
    proto, source = load_model(model, source, base_dir)
    check_supported(proto, source)
    proto = prepare_model(proto, source, isolate)
    input_shapes = dict(input_shapes or {})
    constant_inputs = dict(constant_inputs or {})
    g = proto.graph
    init_names = {t.name for t in g.initializer}
    graph_inputs = [vi for vi in g.input if vi.name not in init_names]
    for name in list(input_shapes) + list(constant_inputs):
        if name not in {vi.name for vi in graph_inputs}:
            raise ModelError(f"{source}: {name!r} is not an input of the model; its inputs are "
                             f"{[vi.name for vi in graph_inputs]}")
    runtime_inputs = [vi for vi in graph_inputs if vi.name not in constant_inputs]
    arg_types = [_input_type(vi, input_shapes, source) for vi in runtime_inputs]

    module = new_module()
    func = new_func(module, "main", arg_types, [vi.name for vi in runtime_inputs])
    body = func.regions[0].blocks[0]
    values = {vi.name: a for vi, a in zip(runtime_inputs, body.args)}
    known: dict = {}
    ctx = ConvertContext(Builder.at_end(body), _default_opset(proto), values, known, source,
                         converters=converters())
    ctx.declared = {vi.name: vi.type.tensor_type.elem_type for vi in list(g.value_info)
                    + list(g.output) if vi.type.HasField("tensor_type")}

    for vi in graph_inputs:
        if vi.name in constant_inputs:
            t = _input_type(vi, {vi.name: np.shape(constant_inputs[vi.name])}, source)
            arr = np.asarray(constant_inputs[vi.name]).astype(t.element.np_dtype)
            ctx.node, ctx.node_name = onnx.helper.make_node("Constant", [], [vi.name]), vi.name
            values[vi.name] = ctx.constant(arr, vi.name)
    for t in g.initializer:
        where = f"{source}: initializer {t.name!r}"
        scalar_type_of(t.data_type, where)
        try:
            ctx.pending[t.name] = numpy_helper.to_array(t)
        except Exception as e:
            raise ModelError(f"{where}: cannot read: {e}") from None

    from .convert.functions import convert_node
    for i, node in enumerate(g.node):
        convert_node(ctx, node, node.name or f"{node.op_type}_{i}")

    results, names = [], []
    for vi in g.output:
        if vi.name not in values and vi.name in ctx.pending:
            values[vi.name] = ctx._materialize(vi.name)
        v = values.get(vi.name)
        if v is None:
            raise ModelError(f"{source}: output {vi.name!r} is not produced by any node")
        if isinstance(v, MissingOutput):
            v.fail()
        results.append(v)
        names.append(vi.name)
        _check_declared(vi, v.type, source)
    set_func_results(func, results, names)
    eliminate_dead_ops(body)
    verify(module)
    return module


def _check_declared(vi: onnx.ValueInfoProto, t: TensorType, source: str) -> None:
    """The output type the model declares, where it is static, must match the computed one."""
    if not vi.type.HasField("tensor_type"):
        return
    tt = vi.type.tensor_type
    if tt.elem_type and ONNX_TYPES.get(tt.elem_type) != t.element.name:
        raise ModelError(f"{source}: output {vi.name!r} is declared "
                         f"{onnx.TensorProto.DataType.Name(tt.elem_type)}, computed {t}")
    if tt.HasField("shape"):
        dims = [d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim]
        if len(dims) != t.rank or any(d is not None and d != s for d, s in zip(dims, t.shape)):
            raise ModelError(f"{source}: output {vi.name!r} is declared with shape "
                             f"{[d if d is not None else '?' for d in dims]}, computed {t}")


def eliminate_dead_ops(block) -> int:
    """Erase pure ops whose results nobody uses, last first; returns how many."""
    count = 0
    op = block.last_op
    while op is not None:
        prev = op.prev_op
        spec = lookup(op.name)
        if spec is not None and spec.has_trait("pure") and not op.has_uses:
            op.erase()
            count += 1
        op = prev
    return count
