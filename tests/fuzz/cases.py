"""Hypothesis strategies for fuzz cases: each case is ``(target, payload)`` with a payload the
worker can rebuild from bytes (a serialized ONNX model, plan bytes, or a pickled-free JSON
description of run inputs).

Structure-aware: models start from seed graphs of the ops ptxc supports and mutate attributes
(to boundary values: 0, -1, 2**31, -2**63, ...), input shapes (0, 1, large), element types,
edges (renamed, dropped, duplicated outputs) and node order; plans start from a real plan and
mutate header fields (to boundary values, wrong types), blobs (byte flips) and length; inputs
mutate names, shapes, dtypes and values (out-of-range indices, NaN, huge)."""

from __future__ import annotations

import copy
import json

from hypothesis import strategies as st
from onnx import TensorProto, helper

INTERESTING = [0, 1, -1, 2, 3, 7, 64, 65, 1000, 2**31 - 1, 2**31, -2**31, 2**32, 2**63 - 1,
               -2**63, 10**6]
DIMS = [0, 1, 2, 3, 5, 8, 1000, 2**31]
DTYPES = [TensorProto.FLOAT, TensorProto.INT64, TensorProto.INT32, TensorProto.FLOAT16,
          TensorProto.BOOL, TensorProto.DOUBLE, TensorProto.UINT8, TensorProto.STRING, 0, 999]


def _vi(name, dtype, shape):
    return helper.make_tensor_value_info(name, dtype, shape)


def seeds():
    """(nodes, inputs, outputs, opset): small valid graphs over many op kinds."""
    f = TensorProto.FLOAT
    x4 = ("x", f, [1, 3, 4, 4])
    return [
        ([helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1], name="c")],
         [x4, ("w", f, [2, 3, 3, 3])], [("y", f, [1, 2, 4, 4])], 13),
        ([helper.make_node("Gather", ["d", "i"], ["y"], axis=0, name="g")],
         [("d", f, [5, 4]), ("i", TensorProto.INT64, [3])], [("y", f, [3, 4])], 13),
        ([helper.make_node("Split", ["x"], ["a", "b"], axis=1, num_outputs=2, name="s")],
         [("x", f, [2, 4])], [("a", f, [2, 2]), ("b", f, [2, 2])], 18),
        ([helper.make_node("LayerNormalization", ["x", "s"], ["y"], axis=-1, name="ln")],
         [("x", f, [2, 4]), ("s", f, [4])], [("y", f, [2, 4])], 17),
        ([helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2, 2], strides=[2, 2],
                           name="p")], [x4], [("y", f, [1, 3, 2, 2])], 13),
        ([helper.make_node("Softmax", ["x"], ["y"], axis=1, name="sm")],
         [("x", f, [2, 5])], [("y", f, [2, 5])], 13),
        ([helper.make_node("Transpose", ["x"], ["y"], perm=[1, 0], name="t")],
         [("x", f, [2, 3])], [("y", f, [3, 2])], 13),
        ([helper.make_node("LRN", ["x"], ["y"], size=3, name="l")], [x4],
         [("y", f, [1, 3, 4, 4])], 13),
        ([helper.make_node("Concat", ["a", "b"], ["y"], axis=0, name="cc")],
         [("a", f, [2, 3]), ("b", f, [1, 3])], [("y", f, [3, 3])], 13),
        ([helper.make_node("ReduceSum", ["x"], ["y"], keepdims=1, name="r")],
         [("x", f, [2, 3])], [("y", f, [1, 1])], 11),
        ([helper.make_node("Flatten", ["x"], ["y"], axis=1, name="fl"),
          helper.make_node("Relu", ["y"], ["z"], name="re")],
         [x4], [("z", f, [1, 48])], 13),
        ([helper.make_node("Gemm", ["a", "b"], ["y"], transB=1, name="gm")],
         [("a", f, [2, 3]), ("b", f, [4, 3])], [("y", f, [2, 4])], 13),
    ]


@st.composite
def models(draw) -> bytes:
    nodes, ins, outs, opset = draw(st.sampled_from(seeds()))
    nodes = [helper.make_node(n.op_type, list(n.input), list(n.output), name=n.name,
                              **{a.name: helper.get_attribute_value(a) for a in n.attribute})
             for n in nodes]
    ins, outs = [list(x) for x in ins], [list(x) for x in outs]
    for _ in range(draw(st.integers(1, 4))):
        what = draw(st.sampled_from(["attr", "new_attr", "dim", "dtype", "edge", "outputs",
                                     "order", "opset"]))
        n = draw(st.sampled_from(nodes))
        if what == "attr" and n.attribute:
            a = draw(st.sampled_from(list(n.attribute)))
            if a.type == a.INT:
                a.i = draw(st.sampled_from(INTERESTING))
            elif a.type == a.INTS and a.ints:
                k = draw(st.integers(0, len(a.ints) - 1))
                a.ints[k] = draw(st.sampled_from(INTERESTING))
        elif what == "new_attr":
            name = draw(st.sampled_from(["axis", "num_outputs", "size", "keepdims", "group",
                                         "axes", "split", "perm", "kernel_shape"]))
            if name in ("axes", "split", "perm", "kernel_shape"):
                v = draw(st.lists(st.sampled_from(INTERESTING), min_size=1, max_size=4))
            else:
                v = draw(st.sampled_from(INTERESTING))
            del_ = [a for a in n.attribute if a.name == name]
            for a in del_:
                n.attribute.remove(a)
            try:
                n.attribute.append(helper.make_attribute(name, v))
            except (ValueError, TypeError):
                pass
        elif what == "dim":
            vi = draw(st.sampled_from(ins + outs))
            if vi[2]:
                k = draw(st.integers(0, len(vi[2]) - 1))
                vi[2] = list(vi[2])
                vi[2][k] = draw(st.sampled_from(DIMS))
        elif what == "dtype":
            vi = draw(st.sampled_from(ins + outs))
            vi[1] = draw(st.sampled_from(DTYPES))
        elif what == "edge" and n.input:
            k = draw(st.integers(0, len(n.input) - 1))
            n.input[k] = draw(st.sampled_from(["", "nope", n.input[0]] + list(n.output)))
        elif what == "outputs":
            if draw(st.booleans()) and len(n.output) > 1:
                n.output.pop()
            else:
                n.output.append(f"extra{len(n.output)}")
        elif what == "order" and len(nodes) > 1:
            nodes.reverse()
        elif what == "opset":
            opset = draw(st.sampled_from([1, 6, 7, 11, 13, 17, 18, 21, 99]))
    g = helper.make_graph(nodes, "fuzz", [_vi(*x) for x in ins], [_vi(*x) for x in outs])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    return m.SerializeToString()


JSON_VALUES = st.sampled_from([None, True, -1, 0, 1, 2**31, 10**30, -10**30, 1.5, "x", [],
                               [1, 2], {}, {"a": 1}, [10**30], [-1]])


@st.composite
def plans(draw, base: bytes) -> bytes:
    """A mutation of a real plan: header fields (checksum recomputed or not), bytes, length."""
    import hashlib
    import struct
    what = draw(st.sampled_from(["field", "field", "field", "flip", "truncate", "extend",
                                 "object"]))
    if what == "object":  # damage the object code's ELF tables, checksum recomputed
        return object_flips(base, draw)
    if what == "flip":
        data = bytearray(base)
        for _ in range(draw(st.integers(1, 8))):
            i = draw(st.integers(0, len(data) - 1))
            data[i] ^= draw(st.integers(1, 255))
        if draw(st.booleans()):
            data[-32:] = hashlib.sha256(bytes(data[:-32])).digest()
        return bytes(data)
    if what == "truncate":
        return base[:draw(st.integers(0, len(base) - 1))]
    if what == "extend":
        return base + b"\0" * draw(st.integers(1, 200))
    _, version, hlen = struct.unpack("<8sIQ", base[:20])
    header = json.loads(base[20:20 + hlen])
    start = -(-(20 + hlen) // 64) * 64
    section = base[start:-32]
    for _ in range(draw(st.integers(1, 3))):
        path = []
        node = header
        while isinstance(node, (dict, list)) and node and draw(st.integers(0, 3)):
            key = draw(st.sampled_from(sorted(node) if isinstance(node, dict)
                                       else list(range(len(node)))))
            path.append(key)
            if not isinstance(node[key], (dict, list)):
                break
            node = node[key]
        if not path:
            continue
        parent = header
        for k in path[:-1]:
            parent = parent[k]
        parent[path[-1]] = copy.deepcopy(draw(JSON_VALUES))  # samples are shared objects
    head = json.dumps(header).encode()
    start = -(-(20 + len(head)) // 64) * 64
    body = struct.pack("<8sIQ", b"PTXCPLAN", version, len(head)) + head
    body += b"\0" * (start - len(body)) + section
    return body + hashlib.sha256(body).digest()


def object_blob(base: bytes) -> tuple[int, int]:
    """(file offset, length) of a cpu plan's object code blob."""
    import struct
    _, _, hlen = struct.unpack("<8sIQ", base[:20])
    header = json.loads(base[20:20 + hlen])
    start = -(-(20 + hlen) // 64) * 64
    row = next(b for b in header["blobs"] if b["kind"] == "object")
    return start + row["offset"], row["nbytes"]


def object_flips(base: bytes, draw) -> bytes:
    """Byte flips and overwrites in the object code's ELF header and tables (section headers,
    symbols, strings, relocations), with the checksum recomputed. Not in the machine code
    itself: a plan's code is trusted as a shared library's is (a flipped instruction is still
    a well-formed object; only a signature keeps it out), which docs/runtime.md says."""
    import hashlib
    import struct
    at, n = object_blob(base)
    obj = base[at:at + n]
    shoff, = struct.unpack_from("<Q", obj, 40)
    shnum, = struct.unpack_from("<H", obj, 60)
    code = []
    for i in range(shnum):
        _, _, flags, _, off, size, _, _, _, _ = struct.unpack_from("<IIQQQQIIQQ", obj,
                                                                   shoff + 64 * i)
        if flags & 0x4:  # SHF_EXECINSTR
            code.append((off, off + size))
    data = bytearray(base)
    for _ in range(draw(st.integers(1, 4))):
        region = draw(st.sampled_from(["header", "tail", "any"]))
        lo, hi = {"header": (0, 64), "tail": (max(0, n - 512), n), "any": (0, n)}[region]
        k = draw(st.integers(lo, hi - 1))
        if any(a <= k < b for a, b in code):
            continue
        if draw(st.booleans()):
            data[at + k] ^= draw(st.integers(1, 255))
        else:
            data[at + k] = draw(st.sampled_from([0, 1, 0x7F, 0x80, 0xFF]))
    data[-32:] = hashlib.sha256(bytes(data[:-32])).digest()
    return bytes(data)


@st.composite
def run_inputs(draw) -> bytes:
    """A JSON description of an Engine.run input for the worker's gather+conv engine."""
    names = ["d", "i", "x"]
    desc = {}
    for n in draw(st.lists(st.sampled_from(names + ["zz", ""]), max_size=4, unique=True)):
        desc[n] = {
            "dtype": draw(st.sampled_from(["float32", "int64", "int32", "float64", "bool",
                                           "object", "uint8"])),
            "shape": draw(st.lists(st.sampled_from([0, 1, 2, 3, 4, 5, 7]), max_size=4)),
            "fill": draw(st.sampled_from(["zeros", "range", "nan", "huge", "neg", "random"])),
            "kind": draw(st.sampled_from(["array", "array", "array", "list", "scalar", "none",
                                          "fortran"])),
        }
    if draw(st.booleans()):  # mostly well-formed, values fuzzed
        desc = {"d": {"dtype": "float32", "shape": [5, 4], "fill": "random", "kind": "array"},
                "i": {"dtype": "int64", "shape": [3], "kind": "array",
                      "fill": draw(st.sampled_from(["zeros", "range", "huge", "neg",
                                                    "random"]))}}
    return json.dumps(desc).encode()
