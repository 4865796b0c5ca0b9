"""GPU benchmark: ptxc's cuda engine against PyTorch eager and torch.compile, same GPU, same run.

    OUT=bench_out PYTHONPATH=. python3 bench/gpu.py [--models resnet50,mobilenet_v2,bert_layer]
        [--batches 1,32] [--budget 390] [--repeat 30]

Models (random weights, fp32): torchvision's resnet50 and mobilenet_v2 (BatchNorm statistics and
affine parameters randomized too, so folding them is checked), and one BERT-base encoder layer
(hidden 768, 12 heads, FFN 3072 with exact GELU, sequence 128, post-LayerNorm), each at every
batch size. Each is exported to ONNX (opset 17, the TorchScript exporter, or the dynamo one where
that fails) into a temporary folder and compiled by ptxc for the cuda target.

For each (model, batch), in this order: the FLOPs of one inference (torch's FlopCounterMode:
convolutions and matrix products, 2 per multiply-add), the export, ptxc's compile time (by stage)
and first run (module load, weight upload, graph capture), ptxc's latency (``run_device`` on the
torch input tensor, CUDA graph on; once into a fresh output array per call, once with ``out=`` a
preallocated torch tensor bound into the kernels, the "out=" columns), torch eager's, torch.compile's (mode default; its compile
time too); the ratios, the achieved TFLOP/s of each, ptxc's ``memory_report()``, and the largest
relative error of ptxc's output against eager's (max |ptxc - eager| / max |eager|). TF32 is off
in torch (cuDNN and matmul), so all three compute in fp32.

Latency: the median of N timed calls after a warm-up, each call bracketed by
``torch.cuda.synchronize()`` (a whole-device synchronize: it also waits for ptxc's stream) and
``time.perf_counter()``; N adapts to the call's time (at most ``--repeat``, at least 5).

Every step runs under a time box taken from the budget left (SIGALRM); a step that fails or runs
out of time records its error in the row and the run goes on: the benchmark never crashes as a
whole. The JSON ($OUT/bench.json) and the markdown table ($OUT/bench.md) are rewritten after every
row, so a run killed from outside keeps what it finished. The table is printed last. Timings are
never test assertions.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import math
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import traceback

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

MODELS = ("resnet50", "mobilenet_v2", "bert_layer")
#: the auto-tuning set (issue 35): beyond the three models the heuristics were timed on
TUNING_SET = ("resnet50", "mobilenet_v2", "efficientnet_b0", "convnext_tiny",
              "resnext50_32x4d", "regnet_y_800mf", "vit_b_16", "swin_t", "bert_layer",
              "gpt2_block")
BERT = {"seq": 128, "hidden": 768, "heads": 12, "ffn": 3072}
GPT2 = {"seq": 256, "hidden": 768, "heads": 12, "ffn": 3072}


class TimeBoxExceeded(Exception):
    pass


@contextlib.contextmanager
def time_box(seconds: float, what: str):
    """Raise TimeBoxExceeded in this (main) thread once ``seconds`` have passed. Python code is
    interrupted at once; a long call into C (a CUDA synchronize, a compiler) when it returns."""
    seconds = max(float(seconds), 1.0)

    def expired(signum, frame):
        raise TimeBoxExceeded(f"{what}: over its time box of {seconds:.0f} s")

    old = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def short_error(e: BaseException, limit: int = 300) -> str:
    text = f"{type(e).__name__}: {e}".replace("\n", " ").replace("|", "/")
    return text if len(text) <= limit else text[:limit] + " ..."


# ---- the models -------------------------------------------------------------------------------

def build_model(name: str, batch: int):
    """(torch module on the GPU in eval mode, input tensor) with fixed random weights."""
    import torch
    torch.manual_seed(0)
    if name == "bert_layer":
        model = encoder_layer(batch, **BERT)
        x = torch.randn(batch, BERT["seq"], BERT["hidden"])
    elif name == "gpt2_block":
        model = decoder_block(batch, **GPT2)
        x = torch.randn(batch, GPT2["seq"], GPT2["hidden"])
    else:   # any torchvision classifier by its name
        import torchvision
        if not hasattr(torchvision.models, name):
            raise ValueError(f"unknown model {name!r}: bert_layer, gpt2_block or a "
                             "torchvision classifier (resnet50, vit_b_16, ...)")
        model = getattr(torchvision.models, name)(weights=None)
        with torch.no_grad():  # BatchNorm that is not the identity: folding it is checked
            for m in model.modules():
                if isinstance(m, torch.nn.BatchNorm2d):
                    m.weight.uniform_(0.5, 1.5)
                    m.bias.normal_(0.0, 0.1)
                    m.running_mean.normal_(0.0, 0.1)
                    m.running_var.uniform_(0.5, 1.5)
        x = torch.randn(batch, 3, 224, 224)
    return model.eval().cuda(), x.cuda()


def encoder_layer(batch: int, seq: int, hidden: int, heads: int, ffn: int):
    """A BERT-base encoder layer (post-LayerNorm, exact GELU, no dropout, no mask), written out
    (not nn.TransformerEncoderLayer, whose fused fast path has no ONNX export) with its shapes as
    Python constants, so the exported Reshapes have constant shapes."""
    import torch
    import torch.nn.functional as F

    class EncoderLayer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.qkv = torch.nn.Linear(hidden, 3 * hidden)
            self.proj = torch.nn.Linear(hidden, hidden)
            self.ln1 = torch.nn.LayerNorm(hidden)
            self.fc1 = torch.nn.Linear(hidden, ffn)
            self.fc2 = torch.nn.Linear(ffn, hidden)
            self.ln2 = torch.nn.LayerNorm(hidden)

        def forward(self, x):
            d = hidden // heads
            q, k, v = self.qkv(x).split(hidden, dim=-1)
            q = q.reshape(batch, seq, heads, d).transpose(1, 2)     # b h s d
            k = k.reshape(batch, seq, heads, d).transpose(1, 2)     # b h s d
            v = v.reshape(batch, seq, heads, d).transpose(1, 2)     # b h s d
            # q @ k^T as models write it (inductor matches this form to its fused attention;
            # a k permuted to b h d s up front made inductor's fp16 compile fail)
            att = torch.softmax(torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(d)),
                                dim=-1)
            ctx = torch.matmul(att, v).transpose(1, 2).reshape(batch, seq, hidden)
            x = self.ln1(x + self.proj(ctx))
            return self.ln2(x + self.fc2(F.gelu(self.fc1(x))))

    return EncoderLayer()


def decoder_block(batch: int, seq: int, hidden: int, heads: int, ffn: int):
    """A GPT-2-small decoder block (pre-LayerNorm, causal self-attention by an additive mask,
    tanh GELU), written out with constant shapes as encoder_layer is."""
    import torch
    import torch.nn.functional as F

    class DecoderBlock(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1 = torch.nn.LayerNorm(hidden)
            self.qkv = torch.nn.Linear(hidden, 3 * hidden)
            self.proj = torch.nn.Linear(hidden, hidden)
            self.ln2 = torch.nn.LayerNorm(hidden)
            self.fc1 = torch.nn.Linear(hidden, ffn)
            self.fc2 = torch.nn.Linear(ffn, hidden)
            mask = torch.triu(torch.full((seq, seq), -1e4), diagonal=1)
            self.register_buffer("mask", mask)

        def forward(self, x):
            d = hidden // heads
            q, k, v = self.qkv(self.ln1(x)).split(hidden, dim=-1)
            q = q.reshape(batch, seq, heads, d).transpose(1, 2)
            k = k.reshape(batch, seq, heads, d).transpose(1, 2)
            v = v.reshape(batch, seq, heads, d).transpose(1, 2)
            att = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(d)) + self.mask
            ctx = torch.matmul(torch.softmax(att, dim=-1), v)
            x = x + self.proj(ctx.transpose(1, 2).reshape(batch, seq, hidden))
            return x + self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh"))

    return DecoderBlock()


def count_flops(model, x) -> int:
    import torch
    from torch.utils.flop_counter import FlopCounterMode
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        model(x)
    return int(counter.get_total_flops())


def export_onnx(model, x, path: str) -> tuple:
    """(ModelProto with its weights loaded, which exporter wrote it)."""
    import onnx
    import torch
    errors = []
    attempts = [("torchscript", {"dynamo": False}),
                ("dynamo", {"dynamo": True, "external_data": False}),
                ("dynamo", {"dynamo": True})]
    for exporter, kwargs in attempts:
        try:
            with torch.no_grad():
                torch.onnx.export(model, (x,), path, opset_version=17, input_names=["x"],
                                  output_names=["y"], **kwargs)
            return onnx.load(path), exporter
        except Exception as e:  # noqa: BLE001  (try the next exporter)
            errors.append(f"{exporter}{sorted(kwargs)}: {short_error(e, 200)}")
    raise RuntimeError("every ONNX export failed: " + "; ".join(errors))


# ---- timing -----------------------------------------------------------------------------------

def median_latency(fn, sync, repeat: int, seconds: float) -> tuple[float, int]:
    """(median seconds of one call, calls timed): a warm-up call, one probe, then as many calls
    as fit in ``seconds`` (at least 5, at most ``repeat``)."""
    sync()
    fn()
    sync()
    t0 = time.perf_counter()
    fn()
    sync()
    probe = time.perf_counter() - t0
    n = int(min(repeat, max(5, seconds / max(probe, 1e-6))))
    times = []
    for _ in range(n):
        sync()
        t0 = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), n


# ---- one (model, batch) -----------------------------------------------------------------------

def bench_one(name: str, batch: int, deadline: float, repeat: int, tmp: str,
              precision: str = "fp32", layout: str = "auto", profile: bool = False,
              options: str = "", tuning: str = "off", timing_cache: str | None = None) -> dict:
    import torch
    import ptxc
    row: dict = {"model": name, "batch": batch, "precision": precision, "layout": layout,
                 "tuning": tuning, "errors": {}, **({"map_options": options} if options else {})}
    left = lambda: deadline - time.perf_counter()  # noqa: E731
    sync = torch.cuda.synchronize

    def step(what: str, share: float = 1.0):
        """A time box of ``share`` of the time left for this row (None when none is left)."""
        if left() < 2.0:
            row["errors"][what] = "skipped: no time left in this row's budget"
            return None
        return time_box(left() * share, what)

    def attempt(what: str, fn, share: float = 1.0):
        box = step(what, share)
        if box is None:
            return None
        try:
            with box:
                return fn()
        except Exception as e:  # noqa: BLE001  (recorded in the row; the run goes on)
            row["errors"][what] = short_error(e)
            print(f"  {name} b{batch} {what} failed: {short_error(e, 2000)}", flush=True)
            if not isinstance(e, TimeBoxExceeded):
                traceback.print_exc(limit=4)
            return None

    built = attempt("build", lambda: build_model(name, batch), 0.2)
    if built is None:
        return row
    model, x = built
    flops = attempt("flops", lambda: count_flops(model, x), 0.1)
    row["gflop"] = None if flops is None else flops / 1e9

    with torch.no_grad():
        ref = attempt("eager output", lambda: model(x).float().cpu().numpy(), 0.1)

    # ptxc: export, compile, first run, numerics, latency
    path = os.path.join(tmp, f"{name}_b{batch}.onnx")
    exported = attempt("export", lambda: export_onnx(model, x, path), 0.3)
    engine = None
    if exported is not None:
        proto, row["exporter"] = exported

        def compile_ptxc():
            t0 = time.perf_counter()
            kw = {"layout": layout} if precision == "fp32" else {"precision": precision,
                                                                  "layout": layout}
            if tuning != "off":
                # the untuned build first: its latency is the tuned one's baseline
                base = ptxc.compile(proto, target="cuda", pass_options=map_options(options),
                                    cache=False, **kw)
                row["ptxc_untuned_compile_s"] = time.perf_counter() - t0
                base_in = {list(base.inputs)[0]: x.contiguous()}
                base.run_device(base_in)
                row["ptxc_untuned_ms"] = median_latency(
                    lambda: base.run_device(base_in), sync, repeat, 5.0)[0] * 1e3
                del base
                kw.update(tuning=tuning, timing_cache=timing_cache)
                t0 = time.perf_counter()
            e = ptxc.compile(proto, target="cuda", pass_options=map_options(options),
                             cache=False if tuning != "off" else None, **kw)
            row["ptxc_compile_s"] = time.perf_counter() - t0
            row["ptxc_compile_stages"] = {k: round(v, 3) for k, v in e.timings.items()}
            if e.tuning:
                row["tuning_rows"] = e.tuning
                row["tuned_kernels"] = sum(1 for r in e.tuning if r["tactic"] != "auto")
            if e.layout is not None:
                row["ptxc_layout"] = e.layout
            return e

        engine = attempt("ptxc compile", compile_ptxc, 0.6 if tuning != "off" else 0.4)
    if engine is not None:
        in_name = list(engine.inputs)[0]
        out_name = list(engine.outputs)[0]
        feeds = {in_name: x.contiguous()}

        def first_run():
            sync()
            t0 = time.perf_counter()
            out = engine.run_device(feeds)
            sync()
            row["ptxc_first_run_s"] = time.perf_counter() - t0
            return out[out_name].copy_to_host()

        got = attempt("ptxc first run", first_run, 0.3)
        if got is not None and ref is not None:
            got = got.reshape(ref.shape) if got.size == ref.size else got
            if got.shape != ref.shape:
                row["errors"]["numerics"] = f"shape {got.shape} vs eager {ref.shape}"
            else:
                row["max_rel_err"] = float(np.max(np.abs(got - ref)) /
                                           (np.max(np.abs(ref)) + 1e-30))
                row["nonfinite"] = int(np.size(got) - np.count_nonzero(np.isfinite(got)))
        try:
            row["memory_report"] = {k: v for k, v in engine.memory_report().items()}
        except Exception as e:  # noqa: BLE001
            row["errors"]["memory_report"] = short_error(e)
        row["cuda_graph"] = getattr(engine, "cuda_graph", None)
        if got is not None:
            t = attempt("ptxc latency",
                        lambda: median_latency(lambda: engine.run_device(feeds), sync, repeat,
                                               min(10.0, left() * 0.25)), 0.35)
            if t is not None:
                row["ptxc_ms"], row["ptxc_n"] = t[0] * 1e3, t[1]

            def bound_latency():
                """run_device into a preallocated output (out=): the caller's buffers are bound
                into the kernels, as a TensorRT user binds them and as torch.compile's
                reduce-overhead mode keeps static outputs; no allocation, no copy per call."""
                import torch
                shape = tuple(engine.outputs[out_name].shape)  # the model's name and type
                out = {out_name: torch.empty(shape, dtype=torch.float32, device="cuda")}
                return median_latency(lambda: engine.run_device(feeds, out=out), sync, repeat,
                                      min(10.0, left() * 0.25))

            t = attempt("ptxc latency out=", bound_latency, 0.35)
            if t is not None:
                row["ptxc_bound_ms"], row["ptxc_bound_n"] = t[0] * 1e3, t[1]
        if got is not None and profile:
            attempt("ptxc profile", lambda: profile_row(row, engine, in_name, x), 0.2)

    # the peers run in the same precision: fp16 is model.half() on half inputs, and
    # torch.compile in mode "reduce-overhead" (CUDA graphs, as ptxc replays one)
    if precision == "fp16":
        import copy
        model = copy.deepcopy(model).half()
        x = x.half()

    # torch eager
    def eager():
        with torch.no_grad():
            return median_latency(lambda: model(x), sync, repeat, min(5.0, left() * 0.2))

    t = attempt("eager latency", eager, 0.3)
    if t is not None:
        row["eager_ms"], row["eager_n"] = t[0] * 1e3, t[1]

    # torch.compile (mode default); its first call compiles
    def compiled():
        with contextlib.suppress(Exception):
            torch._dynamo.reset()  # nothing left over from an earlier row's compile
        cmodel = torch.compile(model, mode="reduce-overhead") if precision == "fp16" \
            else torch.compile(model)
        with torch.no_grad():
            sync()
            t0 = time.perf_counter()
            cmodel(x)
            sync()
            row["compile_first_call_s"] = time.perf_counter() - t0
            return median_latency(lambda: cmodel(x), sync, repeat, min(5.0, left() * 0.2))

    t = attempt("torch.compile", compiled, 0.9)
    if t is not None:
        row["compile_ms"], row["compile_n"] = t[0] * 1e3, t[1]
    if precision == "fp16" and x.dim() == 4:
        # convolutional models: torch.compile on channels-last too (cuDNN's fp16 tensor-core
        # convolutions prefer NHWC); the ratio is against the faster of the two
        def channels_last():
            nonlocal model, x
            model = model.to(memory_format=torch.channels_last)
            x = x.contiguous(memory_format=torch.channels_last)
            return compiled()

        t = attempt("torch.compile channels_last", channels_last, 0.95)
        if t is not None:
            row["compile_nchw_ms"] = row.get("compile_ms")
            row["compile_channels_last_ms"] = t[0] * 1e3
            row["compile_ms"] = min(v for v in (row.get("compile_ms"), t[0] * 1e3) if v)

    for peer in ("eager", "compile"):
        for who in ("ptxc", "ptxc_bound"):
            if row.get(f"{who}_ms") and row.get(f"{peer}_ms"):
                row[f"{who}_over_{peer}"] = row[f"{who}_ms"] / row[f"{peer}_ms"]
    if flops:
        for who in ("ptxc", "eager", "compile"):
            if row.get(f"{who}_ms"):
                row[f"{who}_tflops"] = flops / (row[f"{who}_ms"] * 1e-3) / 1e12
    return row  # the engine, the model and their device memory go with this frame


def with_epilogue(options: str, epilogue: str) -> str:
    """map-to-gpu ``options`` with ``mma-epilogue=epilogue`` in front, unless they name their
    own (the pipeline parser refuses an option given twice)."""
    if "mma-epilogue=" in options:
        return options
    return f"mma-epilogue={epilogue} {options}".strip()


def map_options(options: str) -> dict | None:
    """``compile``'s ``pass_options`` for map-to-gpu ``options`` (pipeline-text options,
    space-separated: ``"mma-epilogue=staged tiled-min-reduction=16"``); None when empty."""
    if not options.strip():
        return None
    from ptxc.rewrite.pipeline import parse_pipeline
    (p,) = parse_pipeline(f"map-to-gpu{{{options}}}")     # values read as pipeline text's
    names = [w.split("=", 1)[0].replace("-", "_") for w in options.split()]
    return {"map-to-gpu": {k: getattr(p, k) for k in names}}


def profile_row(row: dict, engine, in_name: str, x, top: int = 25) -> None:
    """ptxc's per-kernel profile of one run (ptxc.tools.profile): kernels by schedule, the time
    in each schedule, and the ``top`` rows, into the row and printed."""
    from ptxc.tools.profile import profile_engine
    prof = profile_engine(engine, {in_name: np.ascontiguousarray(x.detach().float().cpu().numpy())})
    by: dict = {}
    for r in prof.rows:
        n, t = by.get(r.schedule, (0, 0.0))
        by[r.schedule] = (n + 1, t + r.time)
    row["profile"] = {"kernels": len(prof.rows), "kernel_total_ms": prof.kernel_total * 1e3,
                      "span_ms": prof.measured * 1e3,
                      "by_schedule": {k: {"kernels": n, "ms": t * 1e3} for k, (n, t) in by.items()},
                      "top": prof.to_json()["kernels"][:top]}
    print(prof.format(top=top), flush=True)


# ---- output -----------------------------------------------------------------------------------

def fmt(v, spec: str) -> str:
    return "—" if v is None else format(v, spec)


def ratio(v) -> str:
    return "—" if v is None else f"{v:.2f}x"


def _div(a, b):
    return None if a is None or not b else a / b


def table(rows: list[dict]) -> str:
    lines = ["| model | batch | precision | GFLOP | ptxc compile s | ptxc ms | ptxc out= ms "
             "| eager ms | torch.compile ms | ptxc / eager | ptxc / compile "
             "| ptxc out= / compile | TFLOP/s ptxc / eager / compile | arena MiB "
             "| max rel err | untuned ms | tuned / untuned | tuning s | errors |",
             "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:"
             "|---:|---|"]
    for r in rows:
        arena = (r.get("memory_report") or {}).get("arena_bytes")
        tf = " / ".join(fmt(r.get(f"{w}_tflops"), ".2f") for w in ("ptxc", "eager", "compile"))
        errs = "; ".join(f"{k}: {v}" for k, v in r.get("errors", {}).items()) or ""
        lines.append(
            f"| {r['model']} | {r['batch']} | {r.get('precision', 'fp32')} "
            f"| {fmt(r.get('gflop'), '.1f')} "
            f"| {fmt(r.get('ptxc_compile_s'), '.1f')} | {fmt(r.get('ptxc_ms'), '.3f')} "
            f"| {fmt(r.get('ptxc_bound_ms'), '.3f')} "
            f"| {fmt(r.get('eager_ms'), '.3f')} | {fmt(r.get('compile_ms'), '.3f')} "
            f"| {ratio(r.get('ptxc_over_eager'))} | {ratio(r.get('ptxc_over_compile'))} "
            f"| {ratio(r.get('ptxc_bound_over_compile'))} "
            f"| {tf} | {fmt(None if arena is None else arena / 2**20, '.1f')} "
            f"| {fmt(r.get('max_rel_err'), '.1e')} | {fmt(r.get('ptxc_untuned_ms'), '.3f')} "
            f"| {ratio(_div(r.get('ptxc_ms'), r.get('ptxc_untuned_ms')))} "
            f"| {fmt((r.get('ptxc_compile_stages') or {}).get('tuning'), '.1f')} | {errs} |")
    return "\n".join(lines)


def environment() -> dict:
    env = {"date": time.strftime("%Y-%m-%d %H:%M:%S"), "python": platform.python_version(),
           "host": platform.node()}
    try:
        here = os.path.dirname(os.path.abspath(__file__))
        env["commit"] = subprocess.run(["git", "rev-parse", "--short", "HEAD"],
                                       capture_output=True, text=True, timeout=10,
                                       cwd=here).stdout.strip() or None
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10, cwd=here).stdout
        if env["commit"] and dirty.strip():  # the numbers are not those of the commit alone
            env["commit"] += " + uncommitted changes"
    except Exception:  # noqa: BLE001  (the device machine's copy may have no git)
        env["commit"] = None
    for mod in ("torch", "torchvision", "onnx", "numba_cuda", "llvmlite", "numpy"):
        try:
            env[mod] = __import__(mod).__version__
        except Exception as e:  # noqa: BLE001
            env[mod] = f"unavailable ({type(e).__name__})"
    try:
        import torch
        env["gpu"] = torch.cuda.get_device_name(0)
        env["capability"] = "sm_%d%d" % torch.cuda.get_device_capability(0)
    except Exception as e:  # noqa: BLE001
        env["gpu"] = f"unavailable ({short_error(e)})"
    return env


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--batches", default="1,32")
    ap.add_argument("--budget", type=float, default=390.0,
                    help="seconds for the whole run (each row gets its share of what is left)")
    ap.add_argument("--repeat", type=int, default=30, help="most timed calls per latency")
    ap.add_argument("--precisions", default="fp32",
                    help="fp32 and/or fp16 rows (fp16: ptxc precision='fp16' against torch's "
                         "model.half(), torch.compile mode 'reduce-overhead')")
    ap.add_argument("--layout", default="auto",
                    help="ptxc's layout= (auto, the default as in ptxc.compile; nchw, nhwc)")
    ap.add_argument("--map-options", default="",
                    help="map-to-gpu options for ptxc's compiles, e.g. "
                         "'mma-epilogue=staged tiled-min-reduction=16'")
    ap.add_argument("--tuning", default="off", choices=("off", "fast", "full"),
                    help="ptxc's auto-tuning (the untuned build is timed too, for the ratio)")
    ap.add_argument("--timing-cache", default=None,
                    help="timing cache file for --tuning (a second run reuses it)")
    ap.add_argument("--tuning-set", action="store_true",
                    help="the models of the auto-tuning set: " + ",".join(TUNING_SET))
    ap.add_argument("--profile", action="store_true",
                    help="also ptxc's per-kernel profile of each row (CUDA events per kernel)")
    args = ap.parse_args()
    if args.tuning_set:
        args.models = ",".join(TUNING_SET)
    t_start = time.perf_counter()
    out_dir = os.environ.get("OUT") or "./bench_out"
    os.makedirs(out_dir, exist_ok=True)
    configs = [(m, int(b), p) for p in args.precisions.split(",")
               for m in args.models.split(",") for b in args.batches.split(",")]

    env = environment()
    print("environment: " + ", ".join(f"{k} {v}" for k, v in env.items()), flush=True)
    rows: list[dict] = []
    result = {"environment": env, "args": vars(args), "rows": rows,
              "notes": "latency: median ms of synchronize-bracketed calls; ptxc: run_device on "
                       "the torch input, CUDA graph on; TF32 off in torch; GFLOP: conv and "
                       "matmul FLOPs (2 per multiply-add) from torch's FlopCounterMode; max rel "
                       "err: max|ptxc - eager| / max|eager|"}
    try:
        import torch
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        torch.set_float32_matmul_precision("highest")
        if not torch.cuda.is_available():
            raise RuntimeError("torch sees no CUDA device")
    except Exception as e:  # noqa: BLE001
        print(f"cannot benchmark: {short_error(e)}", flush=True)
        result["error"] = short_error(e)
        with open(os.path.join(out_dir, "bench.json"), "w") as f:
            json.dump(result, f, indent=1)
        return 1

    def write():
        with open(os.path.join(out_dir, "bench.json"), "w") as f:
            json.dump(result, f, indent=1, default=str)
        with open(os.path.join(out_dir, "bench.md"), "w") as f:
            f.write(header + "\n\n" + table(rows) + "\n")

    header = (f"{env.get('date')}, commit {env.get('commit')}, {env.get('gpu')} "
              f"({env.get('capability')}), torch {env.get('torch')}, numba-cuda "
              f"{env.get('numba_cuda')}; precisions {args.precisions} (fp32: TF32 off); "
              f"latency = median of "
              f"synchronize-bracketed calls; ptxc = run_device with CUDA graph")
    with tempfile.TemporaryDirectory(prefix="ptxc_bench_") as tmp:
        for i, (name, batch, precision) in enumerate(configs):
            left = args.budget - (time.perf_counter() - t_start)
            share = left / (len(configs) - i)
            print(f"\n== {name} batch {batch} {precision} (time box {share:.0f} s of "
                  f"{left:.0f} s left)", flush=True)
            try:
                row = bench_one(name, batch, time.perf_counter() + share, args.repeat, tmp,
                                precision, args.layout, args.profile, args.map_options,
                                args.tuning, args.timing_cache)
            except BaseException as e:  # noqa: BLE001  (a row's failure never ends the run)
                if isinstance(e, KeyboardInterrupt):
                    raise
                row = {"model": name, "batch": batch, "precision": precision,
                       "errors": {"row": short_error(e)}}
                traceback.print_exc(limit=6)
            rows.append(row)
            gc.collect()  # the row's engine and models are unreachable now: free their memory
            with contextlib.suppress(Exception):
                torch.cuda.empty_cache()
            print("  " + json.dumps({k: v for k, v in row.items() if k != "memory_report"},
                                    default=str), flush=True)
            write()
    print("\n" + header + "\n")
    print(table(rows), flush=True)
    write()
    return 0


if __name__ == "__main__":
    sys.exit(main())
