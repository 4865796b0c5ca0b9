"""The textual format: MLIR's generic form, with large constants kept as named blobs at the end.

    %y = "graph.conv"(%x, %w) {pads = [1, 1, 1, 1], strides = [1, 1]}
          : (tensor<1x3x8x8xf32>, tensor<4x3x3x3xf32>) -> tensor<1x4x8x8xf32> loc("conv1")
    ...
    {-#
      blobs: {
        w: "0x3F800000..."
      }
    #-}

SSA names come from the values' name hints (ONNX tensor names, sanitized and made unique within
each function), else numbers. Attributes print sorted by name. Printing is deterministic, so
``print -> parse -> print`` is the identity. ``elide_constants=True`` replaces blob contents by
``__elided__`` for display (such text does not parse back); ``elide_larger_than=N`` elides only
the constants of more than N bytes, as MLIR's ``--mlir-elide-elementsattrs-if-larger`` (the
pass manager's dumps do so by default, so a ResNet-50 dump is kilobytes, not 100 MB a pass).
Blobs are hex; the parser reads them at the speed of ``bytes.fromhex`` (hundreds of MB/s).
"""

from __future__ import annotations

import json
import math
import re

import numpy as np

from .attributes import DenseElements
from .core import Block, Operation, Value
from .types import BufferType, FunctionType, ScalarType, TensorType

_BAD_CHARS = re.compile(r"[^A-Za-z0-9_.$\-]")


def format_float(x: float) -> str:
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return repr(float(x))


def _format_element(x, element: ScalarType) -> str:
    if element.name == "i1":
        return "true" if x else "false"
    if element.is_float:
        if element.name == "f64":
            return format_float(float(x))
        s = str(x)  # numpy prints the shortest string that round-trips at this precision
        return {"inf": "inf", "-inf": "-inf", "nan": "nan"}.get(s, s if any(
            c in s for c in ".en") else s + ".0")
    return str(int(x))


class Printer:
    def __init__(self, elide_constants: bool = False, elide_larger_than: int | None = None):
        self.elide = elide_constants
        self.elide_larger_than = elide_larger_than
        self.names: dict[int, str] = {}
        self.used: set[str] = set()
        self.blobs: dict[str, DenseElements] = {}
        self.blob_ids: dict[int, str] = {}
        self.lines: list[str] = []
        self.counter = 0

    # ---- naming ---------------------------------------------------------------------------
    def _name(self, v: Value) -> str:
        key = id(v)
        if key not in self.names:
            hint = v.name_hint
            if hint:
                base = _BAD_CHARS.sub("_", hint)
                if base[0].isdigit():
                    base = "v" + base
                name, i = base, 1
                while name in self.used:
                    name = f"{base}_{i}"
                    i += 1
            else:
                while str(self.counter) in self.used:
                    self.counter += 1
                name = str(self.counter)
                self.counter += 1
            self.used.add(name)
            self.names[key] = name
        return "%" + self.names[key]

    def _blob_name(self, d: DenseElements, hint: str | None) -> str:
        key = id(d)
        if key not in self.blob_ids:
            base = _BAD_CHARS.sub("_", hint or "blob") or "blob"
            if not (base[0].isalpha() or base[0] == "_"):
                base = "b" + base
            name, i = base, 1
            while name in self.blobs:
                name = f"{base}_{i}"
                i += 1
            self.blobs[name] = d
            self.blob_ids[key] = name
        return self.blob_ids[key]

    # ---- values -----------------------------------------------------------------------------
    def attr(self, v, hint: str | None = None) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, int):
            return str(v)
        if isinstance(v, float):
            return format_float(v)
        if isinstance(v, str):
            return json.dumps(v)
        if isinstance(v, tuple):
            return "[" + ", ".join(self.attr(x, hint) for x in v) + "]"
        if isinstance(v, (ScalarType, TensorType, BufferType, FunctionType)):
            return str(v)
        if isinstance(v, DenseElements):
            return self.dense(v, hint)
        raise TypeError(f"cannot print attribute value {v!r} of type {type(v).__name__}")

    def dense(self, d: DenseElements, hint: str | None) -> str:
        if d.is_inline:
            el = d.type.element
            flat = d.array.reshape(-1)
            # f16/f32 elements keep their numpy scalar type: str() then prints the shortest
            # decimal that round-trips at that precision
            seq = flat if el.is_float and el.name != "f64" else flat.tolist()
            items = [_format_element(x, el) for x in seq]
            body = items[0] if d.type.rank == 0 else "[" + ", ".join(items) + "]"
            return f"dense<{body}> : {d.type}"
        if self.elide or (self.elide_larger_than is not None
                          and d.array.nbytes > self.elide_larger_than):
            return f"dense_resource<__elided__> : {d.type}"
        return f"dense_resource<{self._blob_name(d, hint)}> : {d.type}"

    @staticmethod
    def types(ts) -> str:
        return "(" + ", ".join(str(t) for t in ts) + ")"

    # ---- ops ----------------------------------------------------------------------------------
    def op(self, op: Operation, indent: str) -> None:
        head = ""
        if op.results:
            head = ", ".join(self._name(r) for r in op.results) + " = "
        operands = ", ".join(self._name(v) for v in op.operands)
        # blobs are named after the printed name of the op's first result: stable across
        # print -> parse -> print
        hint = self._name(op.results[0])[1:] if op.results else op.attributes.get("sym_name")
        text = f'{indent}{head}"{op.name}"({operands})'
        if op.regions:
            text += " ({"
            for i, region in enumerate(op.regions):
                if i:
                    text = indent + "}, {"
                self.lines.append(text)
                for j, block in enumerate(region.blocks):
                    self.block(block, j, indent, len(region.blocks) > 1)
            text = indent + "})"
        if op.attributes:
            attrs = ", ".join(f"{k} = {self.attr(op.attributes[k], hint)}"
                              for k in sorted(op.attributes))
            text += " {" + attrs + "}"
        results = [r.type for r in op.results]
        rtext = str(results[0]) if len(results) == 1 else self.types(results)
        text += f" : {self.types(v.type for v in op.operands)} -> {rtext}"
        if op.loc is not None:
            text += f" loc({json.dumps(op.loc)})"
        self.lines.append(text)

    def block(self, block: Block, index: int, indent: str, force_header: bool) -> None:
        if block.args or force_header:
            args = ", ".join(f"{self._name(a)}: {a.type}" for a in block.args)
            self.lines.append(f"{indent}^bb{index}({args}):")
        for op in block.ops:
            self.op(op, indent + "  ")

    def blob_section(self) -> None:
        if not self.blobs:
            return
        self.lines.append("{-#")
        self.lines.append("  blobs: {")
        names = list(self.blobs)
        for i, name in enumerate(names):
            data = self.blobs[name].array.tobytes()
            comma = "," if i + 1 < len(names) else ""
            self.lines.append(f'    {name}: "0x{data.hex().upper()}"{comma}')
        self.lines.append("  }")
        self.lines.append("#-}")


def print_ir(op: Operation, elide_constants: bool = False,
             elide_larger_than: int | None = None) -> str:
    """The textual form of ``op`` (usually a module), blobs included unless elided (all of them,
    or those of more than ``elide_larger_than`` bytes)."""
    p = Printer(elide_constants, elide_larger_than)
    if op.name == "builtin.module":
        # names are unique per function, so a module prints each function with a fresh scope
        # but one blob table
        p.lines.append(f'"{op.name}"() ({{')
        for f in op.regions[0].blocks[0].ops:
            p.names, p.used, p.counter = {}, set(), 0
            p.op(f, "  ")
        attrs = ""
        if op.attributes:
            attrs = " {" + ", ".join(f"{k} = {p.attr(op.attributes[k])}"
                                     for k in sorted(op.attributes)) + "}"
        p.lines.append(f"}}){attrs} : () -> ()" + (f" loc({json.dumps(op.loc)})" if op.loc else ""))
    else:
        p.op(op, "")
    p.blob_section()
    return "\n".join(p.lines) + "\n"


def format_array_stats(a: np.ndarray) -> str:
    """A one-line summary of an array (shape, dtype, range), for messages."""
    if a.size == 0 or a.dtype.kind not in "fiub":
        return f"{a.dtype}{list(a.shape)}"
    return f"{a.dtype}{list(a.shape)} in [{a.min()}, {a.max()}]"
