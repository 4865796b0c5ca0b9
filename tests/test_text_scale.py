"""The text format at scale: dumps elide large constants by default (and keep them when asked),
and large printed constants parse back exactly (the speed is measured in bench/text_format.py)."""

import os

import numpy as np

import ptxc
from ptxc.ir.printer import print_ir
from ptxc.rewrite.pass_manager import DUMP_ELIDE_BYTES, PassManager


def _net(n):
    rng = np.random.default_rng(0)
    net = ptxc.Network("big")
    x = net.add_input("x", (1, n))
    w = rng.standard_normal((n, 8)).astype(np.float32)
    small = rng.standard_normal(8).astype(np.float32)
    y = net.add_matmul(x, net.add_constant(w))
    net.mark_output(net.add_elementwise(y, net.add_constant(small), "add"), "y")
    return net.to_module(), w


def test_dumps_elide_large_constants_unless_asked(tmp_path):
    m, w = _net(4096)                                   # 128 KiB of weights, and 32 bytes
    PassManager("cse", dump_dir=tmp_path / "a").run(m)
    text = (tmp_path / "a" / "01-cse.mlir").read_text()
    assert "dense_resource<__elided__> : tensor<4096x8xf32>" in text
    assert os.path.getsize(tmp_path / "a" / "01-cse.mlir") < 4096
    assert w.nbytes > DUMP_ELIDE_BYTES and "tensor<8xf32>" in text
    PassManager("cse", dump_dir=tmp_path / "b", dump_constants=True).run(m)
    text = (tmp_path / "b" / "01-cse.mlir").read_text()
    assert "__elided__" not in text and print_ir(ptxc.parse_ir(text)) == text


def test_large_blob_parses_back_exactly():
    m, w = _net(1 << 16)                                # 2 MiB
    text = print_ir(m)
    back = ptxc.parse_ir(text)
    assert print_ir(back) == text
    consts = [op.attributes["value"].array for op in back.walk()
              if op.name == "graph.constant" and op.attributes["value"].array.size == w.size]
    np.testing.assert_array_equal(consts[0].reshape(w.shape), w)
