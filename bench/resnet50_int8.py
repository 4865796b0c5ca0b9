"""Implicit INT8 on ResNet-50 with random weights (onnx's light model): calibrate on random
inputs, quantize (ptxc.calib.quantize_int8: per-tensor activations, per-channel weights; all 53
convs and the FC int8 after fold-qdq), and compare the int8 logits with fp32 on held-out random
inputs: top-1 agreement and cosine similarity, on ptxc's cpu engine.

    PYTHONPATH=. python bench/resnet50_int8.py --calib 8 --n 256 --method percentile

Random weights (tests/support/light_models.with_random_weights) and N(0, 1) inputs: no download.

``--gpu`` (on the GPU machine): throughput of ResNet-50 (torchvision, random weights, the
model bench/gpu.py builds) at ``--batch`` (32) on the cuda target, ptxc int8 against ptxc fp16,
same run, same layout (``--layout``, default nhwc: the int8 convs' implicit GEMM reads 16-byte
rows of NHWC activations and KRSC filters). int8: calibrated on one batch of random inputs
(``--method``), then ``precision="int8"``; fp16: ``precision="fp16"``. For each: compile
seconds, kernels by schedule (how many ran on tensor cores, with which mma tiles), the logits
against torch eager fp32 (cosine, top-1 agreement over the batch), and three times per batch:

* ``ms`` (latency): the median of synchronize-bracketed ``run_device`` calls (CUDA graph),
  host time included (binding, graph launch, synchronize, a fresh output array: ~0.15-0.18
  ms a call on the H200 at batch 32, the same for both precisions);
* ``throughput_images_per_s``: for each of ``--streams`` (1,2,3), that many host threads
  calling ``run_device`` back to back, each on its own execution context, over their wall time
  (trtexec ``--streams``): with two or more, one thread's host work overlaps another's
  kernels, as a serving loop's does (and the kernels of two inferences may overlap);
  ``throughput_bound_images_per_s`` the same with each thread's output tensors allocated once
  and passed as ``out=`` (trtexec's bindings), where the first allocates them every call;
* ``device_ms``: the CUDA graph alone between two CUDA events (``program.launch_times``).

Prints the int8 / fp16 ratio of each (throughput: per stream count, and the ratio of each
precision's best); the issue's bar (1.5x) is on throughput. Writes
resnet50_int8_gpu.json under $OUT. ``--profile`` adds every
kernel's device time of each precision (a separate run after the timed ones). ``--rounds R``
times every engine R times, in turn after all are compiled (``ms_rounds``; ``ms`` their
median): the H200's wall times of one engine moved by up to 10% between runs (fp16 1.33 to
1.49 ms, its kernels' sum unchanged, session 12-13), and one timing per engine put that drift
into the ratio.

    OUT=bench_out PYTHONPATH=. python3 bench/resnet50_int8.py --gpu --batch 32

``--epilogues fragment,staged`` compiles each precision once per mma epilogue
(ptxc/lower/gpu_map/mma_epilogue.py; map-to-gpu's ``mma-epilogue`` in ``pass_options``,
:func:`bench/gpu.py map_options`): rows ``fp16/fragment``, ``fp16/staged``, ...; the profile's rows carry
each kernel's tile (``... epilogue staged``) and the JSON each precision's staged / fragment
images per second::

    OUT=bench_out PYTHONPATH=. python3 bench/resnet50_int8.py --gpu --batch 32 \
        --epilogues fragment,staged --profile
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))


def _kernels(engine) -> dict:
    """{schedule: count} and {mma tile: count} of a cuda engine's kernel table."""
    scheds, tiles = {}, {}
    for k in engine.kernels.kernels:
        scheds[k.schedule] = scheds.get(k.schedule, 0) + 1
        tile = getattr(k, "tile", None)
        if k.schedule == "mma" and tile:
            tiles[tile] = tiles.get(tile, 0) + 1
    return {"schedules": scheds, "mma_tiles": tiles}


def _tiles_into_profile(row: dict, engine) -> None:
    """Each profiled kernel's tile (the kernel table's), next to its time."""
    tiles = {k.name: getattr(k, "tile", None) for k in engine.kernels.kernels}
    for r in row.get("profile", {}).get("top", []):
        r["tile"] = tiles.get(r["kernel"])


def device_ms(engine, feeds: dict, runs: int) -> float:
    """Median device time of one inference: the CUDA graph replayed between two CUDA events
    (``program.launch_times``), no host time: the floor of the engine's time per batch."""
    engine.run_device(feeds)   # launch_times replays the last run's bindings
    return float(np.median(engine.program.launch_times(runs)))


def throughput(engine, feeds: dict, streams: int, calls: int, batch: int,
               bound: bool = False) -> float:
    """Images per second sustained by ``streams`` host threads, each calling ``run_device``
    ``calls`` times back to back (the engine gives each thread its own execution context:
    stream, arena, CUDA graph), over the wall time of all of them: what ``trtexec
    --streams=N`` reports as throughput. One thread's host work (binding, graph launch,
    synchronize, the output array) then overlaps another's kernels, where the
    synchronize-bracketed latency adds the host's time to every batch.

    ``bound``: each thread passes ``out=`` tensors of its own, allocated once (trtexec's
    preallocated bindings, a serving loop's reused output buffers); without it every call
    returns fresh output arrays, whose allocation and release (numba's ``cuMemAlloc`` /
    batched ``cuMemFree``) are part of the host's work."""
    import threading
    import torch
    shapes = {n: (tuple(a.shape), np.dtype(a.dtype))
              for n, a in engine.run_device(feeds).items()} if bound else {}
    local = threading.local()

    def call():
        if bound and not hasattr(local, "out"):     # this thread's outputs, allocated once
            local.out = {n: torch.empty(s, dtype=getattr(torch, d.name), device="cuda")
                         for n, (s, d) in shapes.items()}
        engine.run_device(feeds, out=getattr(local, "out", None))
    for _ in range(2):                       # every thread's context set up and warm
        ts = [threading.Thread(target=call) for _ in range(streams)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
    torch.cuda.synchronize()
    errors: list = []

    def work():
        try:
            for _ in range(calls):
                call()
        except Exception as e:  # noqa: BLE001  (re-raised below, after every thread ended)
            errors.append(e)
    ts = [threading.Thread(target=work) for _ in range(streams)]
    t0 = time.perf_counter()
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    torch.cuda.synchronize()
    wall = time.perf_counter() - t0
    if errors:
        raise errors[0]
    return streams * calls * batch / wall


#: the --variant words that rewrite the model's stem as a space-to-depth and a 4x4 conv by an
#: ONNX rewrite (bench/stem_space_to_depth.py, the form named; the cuda compile's own pass
#: space-to-depth-stem makes the crd form)
STEM_FORMS = {"stem-s2d": "shifted", "stem-s2d-crd": "crd"}
#: the --variant word prefix that sets to-channels-last's channel-multiple (cuda: 4), e.g.
#: channels-16
CHANNELS = "channels-"
#: the --variant word that compiles without the cuda graph pass space-to-depth-stem (the 7x7
#: stem conv, as before session 17)
STEM_7X7 = "stem-7x7"


def _layout_options(channels, no_s2d: bool) -> tuple[dict, dict]:
    """(pass_options, stage_passes) of ``compile`` for a variant's cuda layout passes:
    ``channels`` (None: unchanged) to-channels-last's channel multiple, ``no_s2d`` the layout
    passes without space-to-depth-stem."""
    from ptxc.pipeline import LAYOUT_PIPELINES
    pass_options = {"to-channels-last": {"channel_multiple": channels}} if channels else {}
    stage_passes = {}
    if no_s2d:
        stage_passes["layout"] = ",".join(s.text for s in LAYOUT_PIPELINES["cuda"]
                                          if s.text != "space-to-depth-stem")
    return pass_options, stage_passes


def gpu_main(args) -> int:
    """ResNet-50 int8 vs fp16 throughput on the cuda target (module docstring)."""
    import tempfile
    import traceback

    import importlib.util

    import torch
    spec = importlib.util.spec_from_file_location(   # bench/gpu.py (tests/gpu is a folder)
        "bench_gpu", os.path.join(os.path.dirname(os.path.abspath(__file__)), "gpu.py"))
    bench_gpu = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench_gpu)
    spec = importlib.util.spec_from_file_location(
        "stem_space_to_depth",
        os.path.join(os.path.dirname(os.path.abspath(__file__)), "stem_space_to_depth.py"))
    stem_s2d = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(stem_s2d)
    build_model, export_onnx = bench_gpu.build_model, bench_gpu.export_onnx
    median_latency = bench_gpu.median_latency

    import ptxc
    from ptxc.calib import calibrate
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    out_dir = os.environ.get("OUT") or "."
    os.makedirs(out_dir, exist_ok=True)
    result = {"batch": args.batch, "layout": args.layout, "method": args.method, "rows": {}}

    def write():
        with open(os.path.join(out_dir, "resnet50_int8_gpu.json"), "w") as f:
            json.dump(result, f, indent=1, default=str)

    model, x = build_model("resnet50", args.batch)
    with torch.no_grad():
        ref = model(x).float().cpu().numpy()
    with tempfile.TemporaryDirectory() as tmp:
        proto, _ = export_onnx(model, x, os.path.join(tmp, "resnet50.onnx"))
    xn = x.cpu().numpy()
    epilogues = args.epilogues.split(",")
    tables = {}
    variants = args.variant or [""]
    variant_precisions = (args.variant_precisions or args.precisions).split(",")
    runs = [(p, e, v) for p in args.precisions.split(",") for e in epilogues for v in variants
            if not v or p in variant_precisions]
    engines = {}   # key -> (engine, feeds), kept for --rounds
    streams = [int(n) for n in str(args.streams).split(",")]
    for precision, epilogue, variant in runs:
        key = precision if len(epilogues) == 1 else f"{precision}/{epilogue}"
        key += f" [{variant}]" if variant else ""
        row = result["rows"].setdefault(key, {"epilogue": epilogue, "variant": variant})
        try:
            kw = {"layout": args.layout, "precision": precision}
            words = variant.split()
            # the model's stem rewritten (see STEM_FORMS), its channel multiple (CHANNELS)
            stem = next((STEM_FORMS[w] for w in words if w in STEM_FORMS), None)
            channels = next((int(w[len(CHANNELS):]) for w in words if w.startswith(CHANNELS)),
                            None)
            map_opts = " ".join(w for w in words if w not in STEM_FORMS and w != STEM_7X7
                                and not w.startswith(CHANNELS))
            model_proto = proto
            if stem:
                if stem not in tables:
                    tables[stem] = stem_s2d.rewrite(proto, stem)
                model_proto = tables[stem]
            if precision == "int8":
                t0 = time.perf_counter()
                cal = f"int8/{stem}" if stem else "int8"
                if cal not in tables:
                    tables[cal] = calibrate(model_proto, [{"x": xn}], args.method, progress=True)
                kw["calibration"] = tables[cal]
                row["calibration_s"] = round(time.perf_counter() - t0, 1)
            t0 = time.perf_counter()
            pass_options, stage_passes = _layout_options(channels, STEM_7X7 in words)
            pass_options.update(bench_gpu.map_options(bench_gpu.with_epilogue(map_opts,
                                                                              epilogue)) or {})
            engine = ptxc.compile(model_proto, target="cuda", pass_options=pass_options,
                                  stage_passes=stage_passes, **kw)
            row["compile_s"] = round(time.perf_counter() - t0, 1)
            row.update(_kernels(engine))
            if precision == "int8":
                row["int8_layers"] = sum(p == "int8" for _, p, _ in engine.layer_precisions)
                row["layers"] = len(engine.layer_precisions)
            feeds = {"x": x.contiguous()}
            got = engine.run_device(feeds)["y"].copy_to_host().reshape(ref.shape)
            a, b = ref.astype(np.float64), got.astype(np.float64)
            row["cosine_vs_fp32_eager"] = float(np.min(np.sum(a * b, 1) / (
                np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))))
            row["top1_agreement"] = float(np.mean(a.argmax(1) == b.argmax(1)))
            sec, n = median_latency(lambda: engine.run_device(feeds), torch.cuda.synchronize,
                                    args.repeat, 10.0)
            row["ms"], row["timed_calls"] = sec * 1e3, n
            row["images_per_s"] = args.batch / sec
            # the timed calls replayed a captured CUDA graph: its output must be the first's
            again = engine.run_device(feeds)["y"].copy_to_host().reshape(ref.shape)
            row["replay_max_abs_diff"] = float(np.max(np.abs(again.astype(np.float64) - b)))
            if args.profile:  # every kernel's device time, apart from the timed runs
                bench_gpu.profile_row(row, engine, "x", x, top=200)
                _tiles_into_profile(row, engine)
            row["device_ms_rounds"] = [device_ms(engine, feeds, args.repeat)]
            row["throughput_rounds"] = {str(n): [throughput(engine, feeds, n, args.repeat,
                                                             args.batch)] for n in streams}
            row["throughput_bound_rounds"] = {
                str(n): [throughput(engine, feeds, n, args.repeat, args.batch, bound=True)]
                for n in streams}
            if args.rounds > 1:
                row["ms_rounds"] = [row["ms"]]
                engines[key] = (engine, feeds)
            del engine
        except Exception as e:  # noqa: BLE001  (recorded; the other precision still runs)
            row["error"] = f"{type(e).__name__}: {e}"[:2000]
            traceback.print_exc(limit=6)
        print(f"== {key}: " + json.dumps(row, default=str), flush=True)
        write()
    # rounds 2 .. R: every engine timed again in turn, so that a drift of the GPU's clocks
    # over the run falls on every row alike; a row's ms is the median of its rounds' medians
    for _ in range(args.rounds - 1):
        for key, (engine, feeds) in engines.items():
            sec, _ = median_latency(lambda: engine.run_device(feeds), torch.cuda.synchronize,
                                    args.repeat, 10.0)
            row = result["rows"][key]
            row["ms_rounds"].append(sec * 1e3)
            row["device_ms_rounds"].append(device_ms(engine, feeds, args.repeat))
            for n in streams:
                row["throughput_rounds"][str(n)].append(
                    throughput(engine, feeds, n, args.repeat, args.batch))
                row["throughput_bound_rounds"][str(n)].append(
                    throughput(engine, feeds, n, args.repeat, args.batch, bound=True))
    for key in engines:
        row = result["rows"][key]
        row["ms"] = float(np.median(row["ms_rounds"]))
        row["images_per_s"] = args.batch / (row["ms"] / 1e3)
    for row in result["rows"].values():
        if "device_ms_rounds" in row:
            row["device_ms"] = float(np.median(row["device_ms_rounds"]))
            row["throughput_images_per_s"] = {n: float(np.median(v))
                                              for n, v in row["throughput_rounds"].items()}
            row["throughput_bound_images_per_s"] = {
                n: float(np.median(v)) for n, v in row["throughput_bound_rounds"].items()}
    engines.clear()
    rows = result["rows"]

    def ips(key, field="images_per_s"):
        return rows.get(key, {}).get(field)
    for e in epilogues:
        i8, f16 = (p if len(epilogues) == 1 else f"{p}/{e}" for p in ("int8", "fp16"))
        tail = "" if len(epilogues) == 1 else f"/{e}"
        if ips(i8) and ips(f16):
            r = ips(i8) / ips(f16)
            result["int8_over_fp16" + tail] = r
            print(f"ResNet-50 batch {args.batch} ({args.layout}, {e} epilogue), latency: int8 "
                  f"{ips(i8):.0f} img/s, fp16 {ips(f16):.0f} img/s: int8 / fp16 = {r:.2f}x",
                  flush=True)
        for field, what in (("throughput", "fresh outputs"), ("throughput_bound", "bound outputs")):
            t8, t16 = ips(i8, field + "_images_per_s"), ips(f16, field + "_images_per_s")
            if not (t8 and t16):
                continue
            for n in t8:
                r = t8[n] / t16[n]
                result[f"{field}_int8_over_fp16/{n}_streams" + tail] = r
                print(f"  {field} ({what}), {n} stream(s): int8 {t8[n]:.0f} img/s, fp16 "
                      f"{t16[n]:.0f} img/s: int8 / fp16 = {r:.3f}x", flush=True)
            r = max(t8.values()) / max(t16.values())
            result[f"{field}_int8_over_fp16" + tail] = r
            print(f"  peak {field} ({what}; best stream count of each): int8 / fp16 = "
                  f"{r:.3f}x (bar: 1.5x)", flush=True)
        d8, d16 = ips(i8, "device_ms"), ips(f16, "device_ms")
        if d8 and d16:
            result["device_int8_over_fp16" + tail] = d16 / d8
            print(f"  device time per batch: int8 {d8:.3f} ms, fp16 {d16:.3f} ms: "
                  f"{d16 / d8:.2f}x", flush=True)
    for p in args.precisions.split(","):
        if ips(f"{p}/staged") and ips(f"{p}/fragment"):
            r = ips(f"{p}/staged") / ips(f"{p}/fragment")
            result[f"staged_over_fragment/{p}"] = r
            print(f"{p}: staged / fragment epilogue images per second = {r:.2f}x", flush=True)
    write()
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calib", type=int, default=8, help="calibration inputs")
    ap.add_argument("--n", type=int, default=256, help="evaluation inputs")
    ap.add_argument("--method", default="percentile")
    ap.add_argument("--json")
    ap.add_argument("--gpu", action="store_true", help="int8 vs fp16 throughput on cuda")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--layout", default="nhwc")
    ap.add_argument("--precisions", default="fp16,int8")
    ap.add_argument("--repeat", type=int, default=30)
    ap.add_argument("--streams", default="1,2,3",
                    help="with --gpu: host threads (execution contexts) of the throughput "
                         "measurements, comma-separated (trtexec --streams)")
    ap.add_argument("--rounds", type=int, default=1,
                    help="time every compiled engine this many times in turn, interleaved "
                         "(ms: the median of the rounds' medians)")
    ap.add_argument("--epilogues",
                    help="with --gpu: mma epilogues to compare, e.g. fragment,staged (default: "
                         "map-to-gpu's, mma_epilogue.DEFAULT_EPILOGUE)")
    ap.add_argument("--profile", action="store_true",
                    help="with --gpu: each kernel's device time (ptxc.tools.profile) per precision")
    ap.add_argument("--variant", action="append",
                    help="with --gpu: extra map-to-gpu options, e.g. 'mma-min-blocks=2', and "
                         f"{' or '.join(STEM_FORMS)} (the stem as a space-to-depth, "
                         f"STEM_FORMS), {CHANNELS}N (channels padded to multiples of N), "
                         f"{STEM_7X7} (without the space-to-depth-stem pass); "
                         "repeat to compare several in one run (each precision runs each, "
                         "unless --variant-precisions says which)")
    ap.add_argument("--variant-precisions",
                    help="with --variant: the precisions that run the variants, e.g. int8 "
                         "(default: all of --precisions; the '' variant runs for all)")
    args = ap.parse_args(argv)
    from ptxc.lower.gpu_map.mma_epilogue import DEFAULT_EPILOGUE, EPILOGUES
    args.epilogues = args.epilogues or DEFAULT_EPILOGUE   # a plain run times what users get
    bad = [e for e in args.epilogues.split(",") if e not in EPILOGUES]
    if bad:
        ap.error(f"--epilogues: {', '.join(bad)}: the epilogues are {', '.join(EPILOGUES)}")
    if args.gpu:
        return gpu_main(args)
    from support import light_models as L

    import ptxc
    from ptxc.calib import calibrate, quantize_int8
    model = L.with_random_weights(L.load("resnet50"))
    t0 = time.perf_counter()
    table = calibrate(model, [L.random_inputs(model, seed=1000 + i) for i in range(args.calib)],
                      args.method, progress=True)
    t_cal = time.perf_counter() - t0
    report = []
    q = quantize_int8(model, table, report=report)
    n_int8 = sum(r[1] == "int8" for r in report)
    t0 = time.perf_counter()
    f32 = ptxc.compile(model, target="cpu")
    i8 = ptxc.compile(q, target="cpu")
    t_compile = time.perf_counter() - t0
    agree, cos = 0, []
    for i in range(args.n):
        x = L.random_inputs(model, seed=i)
        a = next(iter(f32.run(x).values())).ravel().astype(np.float64)
        b = next(iter(i8.run(x).values())).ravel().astype(np.float64)
        agree += int(np.argmax(a) == np.argmax(b))
        cos.append(float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b))))
    row = {"method": args.method, "calibration_inputs": args.calib, "inputs": args.n,
           "int8_layers": f"{n_int8}/{len(report)}", "top1_agreement": agree / args.n,
           "cosine_min": min(cos), "cosine_mean": float(np.mean(cos)),
           "calibration_s": round(t_cal, 1), "compile_s": round(t_compile, 1)}
    print(json.dumps(row, indent=1))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(row, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
