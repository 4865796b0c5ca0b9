"""The Network builder: define a model in Python, layer by layer, as with TensorRT's
INetworkDefinition.

    net = ptxc.Network("tiny")
    x = net.add_input("x", (1, 3, 32, 32))
    y = net.add_conv(x, weight=w, bias=b, stride=1, padding=1, name="conv1")
    y = net.add_activation(y, "relu")
    y = net.add_pooling(y, "max", kernel=2, stride=2)
    net.mark_output(y, "out")
    module = net.to_module()          # the same graph dialect the ONNX importer produces
    model = net.to_onnx()             # the same network as an ONNX model

Each ``add_*`` records one ONNX node and converts it at once through the importer's converters,
so a layer's output shape is known as soon as it is added (``tensor.shape``), a bad layer fails
immediately with a ModelError naming it, and the graph dialect is identical to what importing
``to_onnx()`` gives. ``add_layer(op_type, inputs, **attributes)`` adds any supported ONNX op.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ..dialects.func import func_body, new_func, new_module, set_func_results
from ..errors import ModelError, PtxcError
from ..ir.builder import Builder
from ..ir.core import Operation, Value
from ..ir.types import FunctionType, TensorType, scalar_from_numpy
from ..ir.verifier import verify
from .convert.context import ONNX_TYPES, ConvertContext
from .convert.table import converters
from .onnx_import import eliminate_dead_ops

#: the ONNX opset a Network's layers follow
OPSET = 21

_NP_TO_ONNX = {v: k for k, v in ONNX_TYPES.items()}


class Tensor:
    """A tensor of the network: its name, static shape and element type."""

    __slots__ = ("network", "name", "value")

    def __init__(self, network: "Network", name: str, value: Value):
        self.network, self.name, self.value = network, name, value

    @property
    def shape(self) -> tuple[int, ...]:
        return self.value.type.shape

    @property
    def dtype(self) -> np.dtype:
        return self.value.type.element.np_dtype

    def __repr__(self) -> str:
        return f"Tensor({self.name!r}, {self.value.type})"


def _pair(v, n: int) -> list[int]:
    return [int(v)] * n if np.isscalar(v) else [int(x) for x in v]


class Network:
    """A network under construction; see the module docstring."""

    def __init__(self, name: str = "network"):
        self.name = name
        self._module = new_module()
        self._func = new_func(self._module, "main", [], [])
        self._body = func_body(self._func)
        self._values: dict[str, Value] = {}
        self._ctx = ConvertContext(Builder.at_end(self._body), OPSET, self._values, {}, name,
                                   converters=converters())
        self._inputs: list[onnx.ValueInfoProto] = []
        self._nodes: list[onnx.NodeProto] = []
        self._initializers: list[onnx.TensorProto] = []
        self._outputs: list[tuple[str, Tensor]] = []
        self._count = 0

    # ---- naming ---------------------------------------------------------------------------------
    def _fresh(self, base: str) -> str:
        while True:
            self._count += 1
            name = f"{base}_{self._count}"
            if name not in self._values:
                return name

    def _tensor(self, t) -> Tensor:
        if isinstance(t, Tensor):
            if t.network is not self:
                raise ModelError(f"{self.name}: tensor {t.name!r} belongs to another network")
            return t
        if isinstance(t, (np.ndarray, np.generic, float, int, list)):
            return self.add_constant(np.asarray(t, dtype=np.float32)
                                     if not isinstance(t, (np.ndarray, np.generic)) else t)
        raise ModelError(f"{self.name}: expected a Tensor or an array, got {type(t).__name__}")

    # ---- inputs, constants, outputs -------------------------------------------------------------
    def add_input(self, name: str, shape, dtype=np.float32) -> Tensor:
        """A runtime input of static shape."""
        if name in self._values:
            raise ModelError(f"{self.name}: name {name!r} is already used")
        try:
            el = scalar_from_numpy(dtype)
        except TypeError:
            raise ModelError(f"{self.name}: input {name!r}: dtype {np.dtype(dtype)} is not "
                             "supported") from None
        t = TensorType(tuple(int(d) for d in shape), el)
        arg = self._body.add_arg(t, name)
        self._values[name] = arg
        self._inputs.append(helper.make_tensor_value_info(name, _NP_TO_ONNX[el.name], t.shape))
        return Tensor(self, name, arg)

    def add_constant(self, array, name: str | None = None) -> Tensor:
        """Weights or any constant tensor (an ONNX initializer)."""
        array = np.asarray(array)
        name = name or self._fresh("const")
        if name in self._values:
            raise ModelError(f"{self.name}: name {name!r} is already used")
        self._ctx.node = helper.make_node("Constant", [], [name])
        self._ctx.node_name = name
        v = self._ctx.constant(array, name)
        self._values[name] = v
        self._initializers.append(numpy_helper.from_array(array, name))
        return Tensor(self, name, v)

    def mark_output(self, tensor: Tensor, name: str | None = None) -> None:
        """Make ``tensor`` an output of the network (under ``name``, default its own)."""
        tensor = self._tensor(tensor)
        self._outputs.append((name or tensor.name, tensor))

    # ---- the general layer ---------------------------------------------------------------------
    def add_layer(self, op_type: str, inputs, num_outputs: int = 1, name: str | None = None,
                  **attributes) -> list[Tensor]:
        """Add one layer of any supported ONNX op type; ``None`` skips an optional input."""
        table = self._ctx.converters
        if op_type not in table:
            raise ModelError(f"{self.name}: op type {op_type!r} is not supported")
        ins = [self._tensor(t) if t is not None else None for t in inputs]
        while ins and ins[-1] is None:  # trailing absent inputs are left out, not named ""
            ins.pop()
        name = name or self._fresh(op_type.lower())
        outs = [name] if num_outputs == 1 else [f"{name}:{i}" for i in range(num_outputs)]
        for o in outs:
            if o in self._values:
                raise ModelError(f"{self.name}: name {o!r} is already used")
        node = helper.make_node(op_type, [t.name if t else "" for t in ins], outs, name=name,
                                **{k: v for k, v in attributes.items() if v is not None})
        self._ctx.node, self._ctx.node_name = node, name
        try:
            values = table[op_type](self._ctx)
        except PtxcError:
            raise
        except Exception as e:
            raise self._ctx.error(f"{type(e).__name__}: {e}") from e
        if len(values) < num_outputs:
            raise ModelError(f"{self.name}: layer {name!r} ({op_type}) gives {len(values)} "
                             f"outputs, {num_outputs} requested")
        self._nodes.append(node)
        result = []
        for o, v in zip(outs, values):
            v.name_hint = o
            self._values[o] = v
            result.append(Tensor(self, o, v))
        return result

    def _one(self, op_type, inputs, name=None, **attributes) -> Tensor:
        return self.add_layer(op_type, inputs, 1, name, **attributes)[0]

    # ---- TensorRT-style layers ---------------------------------------------------------------------
    def add_conv(self, x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1,
                 name=None) -> Tensor:
        """Convolution; ``weight`` is (out_channels, in_channels / groups, *kernel)."""
        x = self._tensor(x)
        w = self._tensor(weight)
        n = len(w.shape) - 2
        pads = _pair(padding, n)
        return self._one("Conv", [x, w, bias], name, strides=_pair(stride, n),
                         pads=pads + pads if len(pads) == n else pads,
                         dilations=_pair(dilation, n), group=int(groups),
                         kernel_shape=list(w.shape[2:]))

    def add_deconv(self, x, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1,
                   name=None) -> Tensor:
        w = self._tensor(weight)
        n = len(w.shape) - 2
        pads = _pair(padding, n)
        return self._one("ConvTranspose", [x, w, bias], name, strides=_pair(stride, n),
                         pads=pads + pads if len(pads) == n else pads,
                         output_padding=_pair(output_padding, n), group=int(groups))

    _ACTIVATIONS = {"relu": "Relu", "sigmoid": "Sigmoid", "tanh": "Tanh",
                    "leaky_relu": "LeakyRelu", "elu": "Elu", "selu": "Selu",
                    "hard_sigmoid": "HardSigmoid", "hard_swish": "HardSwish",
                    "softplus": "Softplus", "gelu": "Gelu", "clip": "Clip"}

    def add_activation(self, x, kind: str = "relu", alpha=None, beta=None, name=None) -> Tensor:
        """relu, sigmoid, tanh, leaky_relu(alpha), elu(alpha), selu(alpha, beta),
        hard_sigmoid(alpha, beta), hard_swish, softplus, gelu, clip(alpha=min, beta=max)."""
        if kind not in self._ACTIVATIONS:
            raise ModelError(f"{self.name}: unknown activation {kind!r}; one of "
                             f"{sorted(self._ACTIVATIONS)}")
        if kind == "clip":
            x = self._tensor(x)
            lo = None if alpha is None else self.add_constant(np.array(alpha, x.dtype))
            hi = None if beta is None else self.add_constant(np.array(beta, x.dtype))
            return self._one("Clip", [x, lo, hi], name)
        attrs = {}
        if alpha is not None:
            attrs["alpha"] = float(alpha)
        if beta is not None:
            attrs["beta" if kind != "selu" else "gamma"] = float(beta)
        return self._one(self._ACTIVATIONS[kind], [x], name, **attrs)

    _ELEMENTWISE = {"add": "Add", "sub": "Sub", "mul": "Mul", "div": "Div", "pow": "Pow",
                    "max": "Max", "min": "Min", "equal": "Equal", "less": "Less",
                    "greater": "Greater"}

    def add_elementwise(self, a, b, op: str = "add", name=None) -> Tensor:
        """Binary elementwise with broadcasting: add, sub, mul, div, pow, max, min, equal, ..."""
        if op not in self._ELEMENTWISE:
            raise ModelError(f"{self.name}: unknown elementwise op {op!r}; one of "
                             f"{sorted(self._ELEMENTWISE)}")
        return self._one(self._ELEMENTWISE[op], [a, b], name)

    _UNARY = {"exp": "Exp", "log": "Log", "sqrt": "Sqrt", "neg": "Neg", "abs": "Abs",
              "recip": "Reciprocal", "floor": "Floor", "ceil": "Ceil", "erf": "Erf",
              "not": "Not"}

    def add_unary(self, x, op: str, name=None) -> Tensor:
        if op not in self._UNARY:
            raise ModelError(f"{self.name}: unknown unary op {op!r}; one of {sorted(self._UNARY)}")
        return self._one(self._UNARY[op], [x], name)

    def add_matmul(self, a, b, name=None) -> Tensor:
        return self._one("MatMul", [a, b], name)

    def add_fully_connected(self, x, weight, bias=None, name=None) -> Tensor:
        """``x @ weight.T + bias`` with weight (out_features, in_features), as Gemm(transB=1)."""
        return self._one("Gemm", [x, weight, bias], name, transB=1)

    def add_pooling(self, x, kind: str = "max", kernel=2, stride=None, padding=0,
                    ceil_mode=False, name=None) -> Tensor:
        x = self._tensor(x)
        n = len(x.shape) - 2
        pads = _pair(padding, n)
        op = {"max": "MaxPool", "average": "AveragePool", "avg": "AveragePool"}.get(kind)
        if op is None:
            raise ModelError(f"{self.name}: unknown pooling {kind!r}; max or average")
        return self._one(op, [x], name, kernel_shape=_pair(kernel, n),
                         strides=_pair(kernel if stride is None else stride, n),
                         pads=pads + pads if len(pads) == n else pads, ceil_mode=int(ceil_mode))

    def add_global_pooling(self, x, kind: str = "average", name=None) -> Tensor:
        op = {"max": "GlobalMaxPool", "average": "GlobalAveragePool",
              "avg": "GlobalAveragePool"}.get(kind)
        if op is None:
            raise ModelError(f"{self.name}: unknown global pooling {kind!r}; max or average")
        return self._one(op, [x], name)

    def add_batch_norm(self, x, scale, bias, mean, var, epsilon=1e-5, name=None) -> Tensor:
        return self._one("BatchNormalization", [x, scale, bias, mean, var], name,
                         epsilon=float(epsilon))

    def add_layer_norm(self, x, scale, bias=None, axis=-1, epsilon=1e-5, name=None) -> Tensor:
        return self._one("LayerNormalization", [x, scale, bias], name, axis=int(axis),
                         epsilon=float(epsilon))

    def add_softmax(self, x, axis=-1, name=None) -> Tensor:
        return self._one("Softmax", [x], name, axis=int(axis))

    def add_concat(self, inputs, axis=1, name=None) -> Tensor:
        return self._one("Concat", list(inputs), name, axis=int(axis))

    def add_reshape(self, x, shape, name=None) -> Tensor:
        return self._one("Reshape", [x, self.add_constant(np.array(shape, np.int64))], name)

    def add_transpose(self, x, perm, name=None) -> Tensor:
        return self._one("Transpose", [x], name, perm=[int(p) for p in perm])

    def add_flatten(self, x, axis=1, name=None) -> Tensor:
        return self._one("Flatten", [x], name, axis=int(axis))

    def add_reduce(self, x, op: str = "mean", axes=None, keepdims=True, name=None) -> Tensor:
        op_type = {"mean": "ReduceMean", "sum": "ReduceSum", "max": "ReduceMax",
                   "min": "ReduceMin"}.get(op)
        if op_type is None:
            raise ModelError(f"{self.name}: unknown reduction {op!r}; mean, sum, max or min")
        axes_t = None if axes is None else self.add_constant(np.array(axes, np.int64))
        return self._one(op_type, [x, axes_t], name, keepdims=int(keepdims))

    def add_slice(self, x, starts, ends, axes=None, steps=None, name=None) -> Tensor:
        c = lambda v: None if v is None else self.add_constant(np.array(v, np.int64))  # noqa
        return self._one("Slice", [x, c(starts), c(ends), c(axes), c(steps)], name)

    # ---- results -------------------------------------------------------------------------------
    def to_module(self) -> Operation:
        """The network as a verified graph-dialect module (a fresh copy each call)."""
        if not self._outputs:
            raise ModelError(f"{self.name}: no outputs; call mark_output first")
        module = self._module.clone()
        from ..dialects.func import functions
        func = functions(module)[0]
        body = func_body(func)
        by_name = {v.name_hint: v for v in self._walk_values(body)}
        outs = [by_name[t.name] for _, t in self._outputs]
        for (out_name, t), v in zip(self._outputs, outs):
            if t.name in self._renamed():
                v.name_hint = out_name
        set_func_results(func, outs, [n for n, _ in self._outputs])
        func.attributes["arg_names"] = tuple(a.name_hint for a in body.args)
        func.attributes["function_type"] = FunctionType(
            tuple(a.type for a in body.args), tuple(v.type for v in outs))
        eliminate_dead_ops(body)
        verify(module)
        return module

    @staticmethod
    def _walk_values(body):
        yield from body.args
        for op in body.ops:
            yield from op.results

    def _renamed(self) -> dict[str, str]:
        """Layer outputs marked once under another name: the layer writes that name directly."""
        produced = {o for n in self._nodes for o in n.output}
        marks: dict[str, list[str]] = {}
        for out_name, t in self._outputs:
            marks.setdefault(t.name, []).append(out_name)
        taken = set(self._values)
        return {src: names[0] for src, names in marks.items()
                if src in produced and len(names) == 1 and names[0] != src
                and names[0] not in taken}

    def to_onnx(self) -> onnx.ModelProto:
        """The same network as an ONNX model (opset 21)."""
        if not self._outputs:
            raise ModelError(f"{self.name}: no outputs; call mark_output first")
        rename = self._renamed()
        nodes = []
        for node in self._nodes:
            n = onnx.NodeProto()
            n.CopyFrom(node)
            for field in (n.input, n.output):
                for i, name in enumerate(field):
                    field[i] = rename.get(name, name)
            nodes.append(n)
        outputs = []
        for out_name, t in self._outputs:
            if rename.get(t.name, t.name) != out_name:
                nodes.append(helper.make_node("Identity", [rename.get(t.name, t.name)],
                                              [out_name], name=f"{out_name}_identity"))
            outputs.append(helper.make_tensor_value_info(
                out_name, _NP_TO_ONNX[t.value.type.element.name], t.shape))
        graph = helper.make_graph(nodes, self.name, self._inputs, outputs, self._initializers)
        opsets = [helper.make_opsetid("", OPSET)]
        # the lowest IR version that carries the opset, not this onnx package's newest: a model
        # written by a newer onnx than the reader's runtime (onnxruntime) otherwise fails to open
        return helper.make_model(graph, opset_imports=opsets, producer_name="ptxc.Network",
                                 ir_version=helper.find_min_ir_version_for(opsets))
