"""Parser for the textual format that :mod:`ptxc.ir.printer` writes (see there for the grammar).

Errors are :class:`~ptxc.errors.ParseError` with line and column. Values must be defined before
use (the generic form of graph-like regions); names are scoped per function.
"""

from __future__ import annotations

import json
import re

import numpy as np

from ..errors import ParseError
from .attributes import DenseElements
from .core import Block, Operation, Region, Value
from .types import SCALAR_NAMES, BufferType, FunctionType, ScalarType, TensorType

_WS = re.compile(r"(\s|//[^\n]*)*")
_SHAPED = re.compile(r"(tensor|buffer)<((?:\d+x)*)([a-z0-9]+)"
                     r"(?:,\s*strides\s*\[([-\d,\s]*)\])?(?:,\s*offset\s+(-?\d+))?>")
_VALUE = re.compile(r"%[A-Za-z0-9_.$\-]+")
_BLOCK = re.compile(r"\^bb\d+")
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_.$]*")
_NUMBER = re.compile(r"-?(?:inf|nan|\d+(?:\.\d*)?(?:[eE][+-]?\d+)?)")
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_SCALARS = sorted(SCALAR_NAMES, key=len, reverse=True)


class Parser:
    def __init__(self, text: str, source: str = "<ir>"):
        self.text = text
        self.pos = 0
        self.source = source
        self.scopes: list[dict[str, Value]] = [{}]
        self.pending_blobs: list[tuple[str, TensorType, list]] = []  # (name, type, [holder, key])

    # ---- low-level -------------------------------------------------------------------------
    def error(self, msg: str, pos: int | None = None) -> ParseError:
        pos = self.pos if pos is None else pos
        line = self.text.count("\n", 0, pos) + 1
        col = pos - (self.text.rfind("\n", 0, pos) + 1) + 1
        snippet = self.text[pos:pos + 40].split("\n")[0]
        return ParseError(f"{self.source}:{line}:{col}: {msg} (at {snippet!r})")

    def ws(self) -> None:
        self.pos = _WS.match(self.text, self.pos).end()

    def peek(self, s: str) -> bool:
        self.ws()
        return self.text.startswith(s, self.pos)

    def accept(self, s: str) -> bool:
        if self.peek(s):
            self.pos += len(s)
            return True
        return False

    def expect(self, s: str) -> None:
        if not self.accept(s):
            raise self.error(f"expected {s!r}")

    def match(self, regex: re.Pattern) -> str | None:
        self.ws()
        m = regex.match(self.text, self.pos)
        if not m:
            return None
        self.pos = m.end()
        return m.group(0)

    def string(self) -> str:
        s = self.match(_STRING)
        if s is None:
            raise self.error("expected a string")
        return json.loads(s)

    # ---- types -----------------------------------------------------------------------------
    def scalar_type(self) -> ScalarType | None:
        self.ws()
        for name in _SCALARS:
            if self.text.startswith(name, self.pos):
                end = self.pos + len(name)
                if end < len(self.text) and (self.text[end].isalnum() or self.text[end] == "_"):
                    continue
                self.pos = end
                return ScalarType(name)
        return None

    def type(self):
        self.ws()
        m = _SHAPED.match(self.text, self.pos)
        if m:
            kind, dims, el, strides, offset = m.groups()
            if el not in SCALAR_NAMES:
                raise self.error(f"unknown element type {el!r}")
            shape = tuple(int(d) for d in dims.split("x") if d)
            if kind == "tensor":
                if strides is not None or offset is not None:
                    raise self.error("only buffers have a layout (strides, offset)")
                self.pos = m.end()
                return TensorType(shape, ScalarType(el))
            try:
                if strides is not None:
                    strides = tuple(int(s) for s in strides.split(",") if s.strip())
                t = BufferType(shape, ScalarType(el), strides, int(offset or 0))
            except ValueError as e:
                raise self.error(f"bad buffer layout: {e}") from None
            self.pos = m.end()
            return t
        if self.peek("("):
            ins = self.type_list()
            self.expect("->")
            outs = self.type_list() if self.peek("(") else [self.type()]
            return FunctionType(tuple(ins), tuple(outs))
        t = self.scalar_type()
        if t is None:
            raise self.error("expected a type")
        return t

    def type_list(self) -> list:
        self.expect("(")
        out = []
        if self.accept(")"):
            return out
        while True:
            out.append(self.type())
            if self.accept(")"):
                return out
            self.expect(",")

    # ---- attributes ------------------------------------------------------------------------
    def attr_value(self):
        self.ws()
        if self.peek("["):
            self.expect("[")
            items = []
            if not self.accept("]"):
                while True:
                    items.append(self.attr_value())
                    if self.accept("]"):
                        break
                    self.expect(",")
            return tuple(items)
        if self.peek('"'):
            return self.string()
        if self.accept("true"):
            return True
        if self.accept("false"):
            return False
        if self.peek("dense_resource<"):
            self.expect("dense_resource<")
            name = self.match(_IDENT)
            if name is None:
                raise self.error("expected a blob name")
            self.expect(">")
            self.expect(":")
            t = self.type()
            if name == "__elided__":
                raise self.error("constants were elided when this text was printed; "
                                 "print without elide_constants to get parseable text")
            holder: list = [None]
            self.pending_blobs.append((name, t, holder))
            return holder
        if self.peek("dense<"):
            return self.dense_inline()
        num = self.match(_NUMBER)
        if num is not None:
            if any(c in num for c in ".eEn") or "inf" in num:
                return float(num)
            return int(num)
        return self.type()

    def dense_inline(self) -> DenseElements:
        self.expect("dense<")
        start = self.pos
        if self.accept("["):
            items = []
            if not self.accept("]"):
                while True:
                    items.append(self.scalar_literal())
                    if self.accept("]"):
                        break
                    self.expect(",")
            rank0 = False
        else:
            items = [self.scalar_literal()]
            rank0 = True
        self.expect(">")
        self.expect(":")
        t = self.type()
        if not isinstance(t, TensorType):
            raise self.error("dense constants need a tensor type", start)
        if (rank0 and t.rank != 0) or len(items) != t.size:
            raise self.error(f"{len(items)} elements do not fill {t}", start)
        dtype = t.element.np_dtype
        if t.element.is_float:
            arr = np.array([float(x) for x in items], dtype=np.float64).astype(dtype)
        else:
            arr = np.array(items, dtype=object).astype(dtype)
        return DenseElements(arr.reshape(t.shape), t)

    def scalar_literal(self):
        if self.accept("true"):
            return True
        if self.accept("false"):
            return False
        num = self.match(_NUMBER)
        if num is None:
            raise self.error("expected a number")
        return float(num) if any(c in num for c in ".eEn") else int(num)

    def attr_dict(self) -> dict:
        attrs = {}
        self.expect("{")
        if self.accept("}"):
            return attrs
        while True:
            key = self.match(_IDENT)
            if key is None:
                raise self.error("expected an attribute name")
            self.expect("=")
            attrs[key] = self.attr_value()
            if self.accept("}"):
                return attrs
            self.expect(",")

    # ---- values and ops --------------------------------------------------------------------
    def define(self, name: str, v: Value) -> None:
        scope = self.scopes[-1]
        if name in scope:
            raise self.error(f"value {name} defined twice")
        scope[name] = v
        v.name_hint = None if name[1:].isdigit() else name[1:]

    def use(self, name: str, pos: int) -> Value:
        for scope in reversed(self.scopes):
            if name in scope:
                return scope[name]
        raise self.error(f"value {name} used before it is defined", pos)

    def operation(self) -> Operation:
        start = self.pos
        results = []
        if self.peek("%"):
            while True:
                r = self.match(_VALUE)
                if r is None:
                    raise self.error("expected a result name")
                results.append(r)
                if not self.accept(","):
                    break
            self.expect("=")
        name = self.string()
        self.expect("(")
        operand_refs = []
        if not self.accept(")"):
            while True:
                self.ws()
                p = self.pos
                ref = self.match(_VALUE)
                if ref is None:
                    raise self.error("expected an operand")
                operand_refs.append((ref, p))
                if self.accept(")"):
                    break
                self.expect(",")
        operands = [self.use(r, p) for r, p in operand_refs]
        op = Operation(name, operands)
        isolated = name in ("func.func", "builtin.module")
        if self.peek("("):  # regions come straight after the operands; types only after ':' 
            self.expect("(")
            while True:
                if isolated:
                    self.scopes.append({})
                op.add_region(self.region())
                if isolated:
                    self.scopes.pop()
                if self.accept(")"):
                    break
                self.expect(",")
        if self.peek("{"):
            attrs = self.attr_dict()
            for k, v in attrs.items():
                if isinstance(v, list):  # a blob reference, resolved at the end
                    v[0] = (op, k)
            op.attributes.update(attrs)
        self.expect(":")
        in_types = self.type_list()
        self.expect("->")
        out_types = self.type_list() if self.peek("(") else [self.type()]
        if len(in_types) != len(operands):
            raise self.error(f"{name}: {len(operands)} operands but {len(in_types)} types", start)
        for (ref, p), v, t in zip(operand_refs, operands, in_types):
            if v.type != t:
                raise self.error(f"{ref} has type {v.type}, written as {t}", p)
        if len(out_types) != len(results):
            raise self.error(f"{name}: {len(results)} results but {len(out_types)} types", start)
        from .core import OpResult
        op.results = [OpResult(t, op, i) for i, t in enumerate(out_types)]
        for r, v in zip(results, op.results):
            self.define(r, v)
        if self.accept("loc("):
            op.loc = self.string()
            self.expect(")")
        return op

    def region(self) -> Region:
        self.expect("{")
        region = Region()
        block = None
        while not self.accept("}"):
            if self.peek("^bb"):
                self.match(_BLOCK)
                block = Block()
                region.append(block)
                self.expect("(")
                if not self.accept(")"):
                    while True:
                        ref = self.match(_VALUE)
                        if ref is None:
                            raise self.error("expected a block argument")
                        self.expect(":")
                        self.define(ref, block.add_arg(self.type()))
                        if self.accept(")"):
                            break
                        self.expect(",")
                self.expect(":")
                continue
            if block is None:
                block = region.append(Block())
            block.append(self.operation())
        return region

    def blob_section(self) -> dict[str, bytes]:
        blobs = {}
        if not self.accept("{-#"):
            return blobs
        self.expect("blobs")
        self.expect(":")
        self.expect("{")
        while not self.accept("}"):
            name = self.match(_IDENT)
            if name is None:
                raise self.error("expected a blob name")
            self.expect(":")
            # hex holds no escapes: find the closing quote and decode the slice directly (a
            # regex over a 200 MB string, then json.loads, ran at about 1 MB/s)
            if not self.accept('"0x'):
                raise self.error(f"blob {name} must be a 0x-prefixed hex string")
            end = self.text.find('"', self.pos)
            if end < 0:
                raise self.error(f"blob {name}: unterminated string")
            try:
                blobs[name] = bytes.fromhex(self.text[self.pos:end])
            except ValueError:
                raise self.error(f"blob {name} is not valid hex") from None
            self.pos = end + 1
            self.accept(",")
        self.expect("#-}")
        return blobs

    def parse(self) -> Operation:
        self.ws()
        op = self.operation()
        blobs = self.blob_section()
        self.ws()
        if self.pos != len(self.text):
            raise self.error("unexpected text after the top-level op")
        for name, t, holder in self.pending_blobs:
            if name not in blobs:
                raise ParseError(f"{self.source}: blob {name!r} is referenced but not defined")
            data = blobs[name]
            if len(data) != t.nbytes:
                raise ParseError(f"{self.source}: blob {name!r} has {len(data)} bytes; "
                                 f"{t} needs {t.nbytes}")
            arr = np.frombuffer(data, dtype=t.element.np_dtype).reshape(t.shape)
            owner, key = holder[0]
            owner.attributes[key] = DenseElements(arr, t)
        return op


def parse_ir(text: str, source: str = "<ir>") -> Operation:
    """Parse the textual form back into ops (a module, usually)."""
    if not isinstance(text, str):
        raise ParseError(f"{source}: expected IR text (str), got {type(text).__name__}")
    try:
        return Parser(text, source).parse()
    except RecursionError:
        raise ParseError(f"{source}: nesting too deep") from None
