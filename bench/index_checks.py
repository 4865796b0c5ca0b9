"""Cost of the run-time index checks (arith.check_index, issue 13) on the CPU engine.

A BERT-base-like embedding and FFN block at sequence length 128: token Gather from a
30522 x 768 table plus a position Gather from 512 x 768, LayerNormalization, MatMul 768x3072,
Relu, MatMul 3072x768. It is compiled twice: as ptxc compiles it (every Gather index checked,
the error flag read after the run) and with each check replaced by a no-op at the loop stage
(no check, no negative wrap either: a conservative baseline). Both engines run alternately;
the median of N runs of each is printed, and their ratio.

ResNet-50 has no Gather at run time (its shape Gathers fold at compile time), so its programs
hold no check and no flag: the cost there is zero by construction (`--resnet` counts the checks
in the light ResNet-50 to show it).

    PYTHONPATH=. python bench/index_checks.py [--repeat 30] [--resnet]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
from onnx import TensorProto, helper, numpy_helper

import ptxc
from ptxc.codegen import build
from ptxc.driver.engine import Engine
from ptxc.target import Target


def bert_block(seq=128, hidden=768, vocab=30522, ffn=3072, embedding_only=False):
    rng = np.random.default_rng(0)

    def w(name, *shape):
        return numpy_helper.from_array((rng.standard_normal(shape) * 0.02).astype(np.float32),
                                       name)
    inits = [w("tok", vocab, hidden), w("pos", 512, hidden), w("w1", hidden, ffn),
             w("w2", ffn, hidden), w("gamma", hidden), w("beta", hidden)]
    nodes = [helper.make_node("Gather", ["tok", "ids"], ["t"], axis=0, name="tok_emb"),
             helper.make_node("Gather", ["pos", "pids"], ["p"], axis=0, name="pos_emb"),
             helper.make_node("Add", ["t", "p"], ["e"]),
             helper.make_node("LayerNormalization", ["e", "gamma", "beta"], ["n"], axis=-1),
             helper.make_node("MatMul", ["n", "w1"], ["h"]),
             helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("MatMul", ["r", "w2"], ["y"])]
    if embedding_only:
        nodes = nodes[:3]
        nodes[2].output[0] = "y"
    g = helper.make_graph(nodes, "bert_block",
                          [helper.make_tensor_value_info("ids", TensorProto.INT64, (1, seq)),
                           helper.make_tensor_value_info("pids", TensorProto.INT64, (1, seq))],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, (1, seq, hidden))],
                          inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def unchecked_engine(model) -> Engine:
    """The same loop program with every check removed (its result replaced by its operand)."""
    from ptxc.compiler import as_module, run_stages
    module = run_stages(as_module(model), "loop", target="cpu")
    checks = [o for o in module.walk() if o.name == "arith.check_index"]
    assert checks, "no check found"
    for o in checks:
        o.results[0].replace_all_uses_with(o.operands[0])
        o.erase()
    return Engine.from_artifact(build(module, Target.host())), len(checks)


def measure(model, repeat: int, label: str) -> None:
    checked = ptxc.compile(model, target="cpu")
    plain, n = unchecked_engine(model)
    rng = np.random.default_rng(1)
    feeds = {"ids": rng.integers(0, 30522, (1, 128)).astype(np.int64),
             "pids": np.arange(128, dtype=np.int64)[None]}
    ya, yb = checked.run(feeds)["y"], plain.run(feeds)["y"]
    assert ya.tobytes() == yb.tobytes()
    times = {"checked": [], "unchecked": []}
    for _ in range(repeat):
        for name, e in (("checked", checked), ("unchecked", plain)):
            t0 = time.perf_counter()
            e.run(feeds)
            times[name].append(time.perf_counter() - t0)
    med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
    print(f"{label}, seq 128, {n} checks, median of {repeat}: checked {med['checked']:.3f} ms, "
          f"unchecked {med['unchecked']:.3f} ms, ratio {med['checked'] / med['unchecked']:.4f}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=30)
    ap.add_argument("--resnet", action="store_true")
    a = ap.parse_args()
    measure(bert_block(embedding_only=True), a.repeat * 20, "BERT-like embeddings only")
    measure(bert_block(), a.repeat, "BERT-like embeddings + LayerNorm + FFN")
    if a.resnet:
        import sys
        sys.path.insert(0, "tests")
        from support import light_models as lm
        from ptxc.compiler import as_module, run_stages
        module = run_stages(as_module(lm.load("resnet50")), "loop", target="cpu")
        n = sum(o.name == "arith.check_index" for o in module.walk())
        print(f"resnet50 (light): {n} checks at the loop stage")


if __name__ == "__main__":
    main()
