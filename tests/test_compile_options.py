"""One compile spine (ptxc/pipeline.py): ``compile``, ``explore``, ``bisect`` and the ``ptxc``
command share one option set, CompileOptions; pass options are data; the stage tables are
read-only and no test or bench file changes them; the stages run in one loop; the cache key
covers what decides the code; a cuda build for another arch needs no GPU."""

import ast
import inspect
import os

import attrs
import numpy as np
import pytest

import ptxc
from ptxc import pipeline
from ptxc.errors import CompileError
from ptxc.pipeline import (LAYOUT_PIPELINES, STAGE_PIPELINES, CompileOptions, build_pipeline,
                           run_stages)
from ptxc.target import Target

from support.tool_models import cbr_model, save

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _params(fn) -> dict:
    return {k: p.default for k, p in inspect.signature(fn).parameters.items()
            if p.kind is p.KEYWORD_ONLY or p.default is not p.empty}


#: the option set: CompileOptions.make's keywords and their defaults
OPTIONS = _params(CompileOptions.make)

#: where an entry point's options differ from OPTIONS, and why
EXCEPTIONS = {
    # whether to use the compile cache: a choice of compile() itself, not of what it builds
    ("compile", "cache"): "compile-only",
    # explore and bisect print IR or a verdict that should not depend on the machine: their
    # target is cpu unless named (explore's is cuda for stage ptx), where compile's is auto
    ("explore", "target"): None,
    ("bisect", "target"): "cpu",
}
#: options an entry point does not take by keyword (all are reachable with options=)
NOT_TAKEN = {
    # the engine's runtime options and int8 calibration: explore builds no engine
    "explore": {"threads", "cuda_graph", "max_memory", "calibration", "calibration_cache",
                # tuning measures and builds engines; explore shows IR (options= takes tactics)
                "tactics", "tuning", "timing_cache", "tuning_budget_s", "tuning_workers"},
    # bisect compares fp32 graphs; it takes the pipeline, the shapes and the target
    "bisect": set(OPTIONS) - {"graph_passes", "input_shapes", "target", "arch"},
}
#: explore's and bisect's own keywords (display, search), not compile options
OWN = {
    "explore": {"stage", "print_ir_after_all", "print_ir_after_change", "dump_dir", "timing",
                "elide_constants", "report", "explain", "dump_constants"},
    "bisect": {"atol", "rtol", "seed", "later_stages"},
}


def test_compile_options_fields_are_make_s_keywords():
    fields = {f.name for f in attrs.fields(CompileOptions)}
    assert set(OPTIONS) == fields - {"target"} | {"target", "arch"}
    made = CompileOptions.make(target="cpu")
    for f in attrs.fields(CompileOptions):
        if f.name not in ("target", "precision_overrides", "stage_passes", "pass_options",
                          "tactics"):
            assert getattr(made, f.name) == OPTIONS[f.name], f.name
    assert dict(made.precision_overrides) == dict(made.stage_passes) == dict(made.tactics) == {}


@pytest.mark.parametrize("name, fn", [("compile", ptxc.compile), ("explore", ptxc.explore),
                                      ("bisect", None)])
def test_entry_points_take_the_option_set(name, fn):
    if fn is None:
        from ptxc.tools.bisect import bisect_model as fn
    params = _params(fn)
    assert params.pop("options") is None
    for k in OWN.get(name, ()):
        params.pop(k)
    expected = {k: v for k, v in OPTIONS.items() if k not in NOT_TAKEN.get(name, ())}
    for (where, k), default in EXCEPTIONS.items():
        if where == name:
            if k in expected:
                expected[k] = default
            else:
                expected[k] = params[k]
    assert params == expected


def test_cli_options_are_compile_options():
    """Every CLI option that sets a compile option names one of OPTIONS, with its default
    (--no-cuda-graph is cuda_graph=False; the precision flags set precision)."""
    from ptxc.cli_options import OPTIONS as CLI
    fields = {}
    for o in CLI.values():
        if o.field is None:
            continue
        assert o.field in OPTIONS, o.flags
        fields.setdefault(o.field, []).append(o)
        if o.field == "precision" and o.flags[0] != "--precision":
            continue                                   # --fp16, --int8, --tf32
        if o.field == "cuda_graph":
            assert o.default is False and OPTIONS["cuda_graph"] is True   # --no-cuda-graph
        elif o.kwargs.get("action") == "append":
            assert o.default is None and OPTIONS[o.field] is None
        else:
            assert o.default == OPTIONS[o.field], o.flags
    # options a command line does not give: data (constant inputs, per-pass options, stage
    # pipelines) and the engine's runtime sizes
    assert set(OPTIONS) - set(fields) == {"constant_inputs", "pass_options", "stage_passes",
                                          "threads", "max_memory", "tactics"}


def test_cli_builds_compile_options():
    from ptxc.cli import build_parser
    from ptxc.cli_options import compile_options
    args = build_parser().parse_args(
        ["compile", "m.onnx", "--arch", "sm_89", "--fp16", "--precision-override", "fc=fp32",
         "--layout", "nhwc", "--input-shape", "x=1x3x8x8", "--no-cuda-graph"])
    o = compile_options(args)
    assert o == CompileOptions.make("cuda", "sm_89", precision="fp16", layout="nhwc",
                                    precision_overrides={"fc": "fp32"},
                                    input_shapes={"x": (1, 3, 8, 8)}, cuda_graph=False)
    assert o.target.arch == "sm_89" and o.target == Target.preset("sm_89")


# ---- the options themselves ----------------------------------------------------------------

def test_validated_once_with_typed_errors():
    with pytest.raises(CompileError, match="unknown precision 'fp8'"):
        CompileOptions.make("cpu", precision="fp8")
    with pytest.raises(CompileError, match="not raised to 'fp16'"):
        CompileOptions.make("cpu", precision="tf32", precision_overrides={"a": "fp16"})
    with pytest.raises(CompileError, match="unknown layout"):
        CompileOptions.make("cpu", layout="nwhc")
    with pytest.raises(CompileError, match="unknown target 'tpu'"):
        CompileOptions.make("tpu")
    with pytest.raises(CompileError, match="arch='sm_90' is for target 'cuda'"):
        CompileOptions.make("cpu", "sm_90")
    with pytest.raises(CompileError, match="threads= is for target 'cpu'"):
        CompileOptions.make("cuda", threads=2)
    with pytest.raises(CompileError, match="calibration is for precision='int8'"):
        CompileOptions.make("cpu", calibration_cache="x.json")
    with pytest.raises(CompileError, match="max_memory"):
        CompileOptions.make("cpu", max_memory=-1)
    with pytest.raises(CompileError, match="stage_passes: no stage 'graph'"):
        CompileOptions.make("cpu", stage_passes={"graph": "dce"})
    # auto with an arch is cuda, on any machine
    assert CompileOptions.make("auto", "sm_80").target == Target.preset("sm_80")
    o = CompileOptions.make("cpu", input_shapes={"x": (1, 3)})
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        o.precision = "fp16"
    with pytest.raises(TypeError):
        o.input_shapes["x"] = (1,)          # read-only


def test_pass_options_are_checked_against_the_pass():
    with pytest.raises(CompileError, match="pass 'map-to-gpu' has no option 'mma-epilog'"):
        CompileOptions.make("cuda", pass_options={"map-to-gpu": {"mma-epilog": "staged"}})
    with pytest.raises(CompileError, match="pass 'map-to-gpu'.*mma-epilogue must be one of"):
        CompileOptions.make("cuda", pass_options={"map-to-gpu": {"mma_epilogue": "both"}})
    with pytest.raises(CompileError, match="unknown pass 'map-to-cpu'"):
        CompileOptions.make("cuda", pass_options={"map-to-cpu": {}})
    with pytest.raises(CompileError, match="block-size.*'many' is not a valid int"):
        CompileOptions.make("cuda", pass_options={"map-to-gpu": {"block-size": "many"}})
    # kebab or snake names, text or typed values: the same options
    a = CompileOptions.make("cuda", pass_options={"map-to-gpu": {"block-size": "128"}})
    b = CompileOptions.make("cuda", pass_options={"map-to-gpu": {"block_size": 128}})
    assert a == b and dict(a.pass_options["map-to-gpu"]) == {"block_size": 128}


def test_build_pipeline_gives_configured_pass_objects():
    from ptxc.lower.gpu_map import MapToGpu
    from ptxc.lower.tensor_to_loop import LowerTensorToLoop
    from ptxc.rewrite.pass_ import Pass
    o = CompileOptions.make("cuda", "sm_80", pass_options={
        "map-to-gpu": {"mma_epilogue": "fragment"}, "lower-tensor-to-loop": {"jam-min-points": 7}})
    loop = build_pipeline(o, "loop")
    assert loop == [LowerTensorToLoop(jam_min_points=7),
                    MapToGpu(mma_epilogue="fragment", arch="sm_80", target=o.target)]
    assert loop[1].target.name == "a100"      # the Target itself, not only its arch
    cpu = CompileOptions.make("cpu")
    for stage in ("graph", "tensor", "loop"):
        assert all(isinstance(p, Pass) for p in build_pipeline(cpu, stage, layout="nhwc"))
    cpu_loop = build_pipeline(cpu, "loop")
    assert [p.name for p in cpu_loop] == ["lower-tensor-to-loop", "cpu-schedule"]
    assert cpu_loop[1].target == cpu.target     # (the schedule pass gets the host target)
    nhwc = [p.name for p in build_pipeline(o, "graph", layout="nhwc")]
    assert nhwc[-5:] == [s.text.split("{")[0] for s in LAYOUT_PIPELINES["cuda"]]
    fp16 = build_pipeline(attrs.evolve(o, precision="fp16"), "graph", layout="nchw")
    assert fp16[-1].name == "lower-precision"
    with pytest.raises(CompileError, match="resolved per module"):
        build_pipeline(CompileOptions.make("cpu"), "graph")    # layout auto: needs the module
    with pytest.raises(CompileError, match="no pass pipeline"):
        build_pipeline(cpu, "ptx")


def test_cache_key_is_stable_and_covers_what_decides_the_code():
    def key(**kw):
        return CompileOptions.make(**{"target": "cuda", "arch": "sm_90", **kw}).cache_key()
    assert key() == key() and isinstance(key(), str) and hash(key())
    others = [key(arch="sm_80"), key(arch="h100-pcie"), key(precision="fp16"),
              key(layout="nhwc"), key(graph_passes="dce"), key(input_shapes={"x": (2, 3)}),
              key(constant_inputs={"c": np.zeros(3, np.float32)}),
              key(stage_passes={"tensor": "lower-graph-to-tensor"}),
              key(pass_options={"map-to-gpu": {"pdl": False}}),
              key(precision="fp16", precision_overrides={"fc": "fp32"})]
    assert len({key(), *others}) == len(others) + 1
    # runtime options are applied to a loaded engine: not in the key
    assert key(cuda_graph=False, max_memory=1 << 30, check_numerics=True) == key()


# ---- the tables ----------------------------------------------------------------------------

def test_stage_tables_are_read_only():
    for table in (STAGE_PIPELINES, STAGE_PIPELINES["cuda"], LAYOUT_PIPELINES):
        with pytest.raises(TypeError):
            table["loop"] = ()    # noqa: ptxc-table (the point of the test)
    assert isinstance(STAGE_PIPELINES["cuda"]["loop"], tuple)
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        STAGE_PIPELINES["cuda"]["loop"][0].text = "dce"   # noqa: ptxc-table


TABLES = {"STAGE_PIPELINES", "TARGET_STAGE_PIPELINES", "LAYOUT_PIPELINES"}


def _mentions(node, names) -> bool:
    return any(isinstance(n, ast.Name) and n.id in names or
               isinstance(n, ast.Attribute) and n.attr in names or
               isinstance(n, ast.Constant) and n.value in names for n in ast.walk(node))


def table_writes(path: str) -> list[str]:
    """Lines of ``path`` that assign to, delete from, mutate or monkeypatch a pipeline table,
    directly or through a name bound to one (lines marked ``noqa: ptxc-table`` excepted)."""
    with open(path) as f:
        text = f.read()
    lines = text.splitlines()
    tree = ast.parse(text, path)
    names = set(TABLES)
    refs = (ast.Name, ast.Attribute, ast.Subscript)
    for node in ast.walk(tree):   # aliases: table = compiler.TARGET_STAGE_PIPELINES["cuda"]
        if isinstance(node, ast.Assign):
            v = node.value
            values = [v.body, v.orelse] if isinstance(v, ast.IfExp) else [v]
            targets = node.targets
        elif isinstance(node, ast.For):
            values = node.iter.elts if isinstance(node.iter, (ast.Tuple, ast.List)) else []
            targets = [node.target]
        else:
            continue
        if any(isinstance(v, refs) and _mentions(v, TABLES) for v in values):
            names |= {t.id for t in targets if isinstance(t, ast.Name)}
    found = []
    for node in ast.walk(tree):
        targets = []
        if isinstance(node, (ast.Assign, ast.Delete)):
            targets = [t for t in node.targets if not isinstance(t, ast.Name)]
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            f = node.func
            if f.attr in ("setitem", "setattr", "delitem", "delattr") and node.args:
                targets = node.args[:2]
            elif f.attr in ("update", "pop", "clear", "setdefault", "popitem",
                            "__setitem__", "__delitem__"):
                targets = [f.value]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and \
                node.func.id in ("setattr", "delattr") and node.args:
            targets = node.args[:2]
        if any(_mentions(t, names) for t in targets) and \
                "noqa: ptxc-table" not in lines[node.lineno - 1]:
            found.append(f"{os.path.relpath(path, ROOT)}:{node.lineno}: "
                         f"{lines[node.lineno - 1].strip()}")
    return sorted(found, key=lambda w: int(w.split(":")[1]))


def test_the_table_check_finds_writes(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("from ptxc import compiler, pipeline\n"
                   "compiler.TARGET_STAGE_PIPELINES['cuda'] = {}\n"
                   "def t(monkeypatch):\n"
                   "    monkeypatch.setitem(pipeline.STAGE_PIPELINES, 'cpu', {})\n"
                   "    monkeypatch.setattr(pipeline, 'LAYOUT_PIPELINES', {})\n"
                   "    pipeline.STAGE_PIPELINES['cuda']['loop'] += ('x',)\n"
                   "    table = pipeline.LAYOUT_PIPELINES\n"
                   "    pipeline.LAYOUT_PIPELINES.update({})\n"
                   "    table['cuda'] = ()\n"
                   "    runs = pipeline.run_stages\n"
                   "    monkeypatch.setattr(pipeline, 'run_stages', runs)\n")
    assert [w.split(":")[1] for w in table_writes(str(bad))] == ["2", "4", "5", "6", "8", "9"]


def test_no_test_or_bench_file_writes_a_pipeline_table():
    """Tests and benchmarks set pass options through CompileOptions (pass_options,
    stage_passes), never by changing a module's tables."""
    found = []
    for folder in ("tests", "bench"):
        for dirpath, _, files in os.walk(os.path.join(ROOT, folder)):
            for f in sorted(files):
                if f.endswith(".py"):
                    found += table_writes(os.path.join(dirpath, f))
    assert not found, "\n".join(found)


# ---- one stage loop --------------------------------------------------------------------------

def test_compile_explore_and_bisect_run_the_one_stage_loop(monkeypatch, tmp_path):
    from ptxc.tools.bisect import bisect_model
    built = []
    real = pipeline.stage_groups

    def counting(options, stage, layout=None):
        built.append(stage)
        return real(options, stage, layout)
    monkeypatch.setattr(pipeline, "stage_groups", counting)
    model = cbr_model()
    ptxc.compile(model, target="cpu", cache=False)
    assert built == ["graph", "tensor", "loop"]
    built.clear()
    ptxc.explore(model, stage="loop", target="cuda", arch=None)
    assert built == ["graph", "tensor", "loop"]
    built.clear()
    assert not bisect_model(model).found
    assert built[-3:] == ["graph", "tensor", "loop"] and set(built[:-3]) == {"graph"}


def test_explore_shows_what_compile_runs():
    """explore's passes are compile's: pass options included."""
    model = cbr_model()
    text = ptxc.explore(model, stage="loop", target="cuda", print_ir_after_all=True,
                        pass_options={"map-to-gpu": {"block_size": 64}})
    assert "IR Dump After map-to-gpu{block-size=64" in text
    options = CompileOptions.make("cpu", graph_passes="")
    assert ptxc.explore(model, options=options) == ptxc.explore(model, graph_passes="")
    with pytest.raises(CompileError, match="give options= or the keywords"):
        ptxc.explore(model, options=options, precision="fp16")


def test_compile_takes_options(tmp_path):
    model = cbr_model()
    x = {"x": np.random.default_rng(0).standard_normal((1, 3, 16, 16)).astype(np.float32)}
    a = ptxc.compile(model, options=CompileOptions.make("cpu", threads=1), cache=False)
    b = ptxc.compile(model, target="cpu", threads=1, cache=False)
    np.testing.assert_array_equal(a.run(x)["y"], b.run(x)["y"])
    with pytest.raises(CompileError, match=r"give options= or the keywords \['layout'\]"):
        ptxc.compile(model, options=CompileOptions.make("cpu"), layout="nhwc")


def test_run_stages_takes_options_or_keywords():
    a = run_stages(ptxc.import_onnx(cbr_model()), "tensor", CompileOptions.make("cpu"))
    b = run_stages(ptxc.import_onnx(cbr_model()), "tensor", target="cpu")
    assert ptxc.print_ir(a) == ptxc.print_ir(b)
    with pytest.raises(CompileError, match="not both"):
        run_stages(a, "loop", CompileOptions.make("cpu"), precision="fp16")


# ---- another GPU, no GPU -----------------------------------------------------------------------

def test_cli_compiles_for_sm_89_without_a_gpu(tmp_path, capsys, monkeypatch):
    from numba import cuda

    from ptxc.cli import main
    monkeypatch.setattr(cuda, "is_available", lambda: False)   # "no GPU", on any machine
    monkeypatch.setenv("PTXC_CACHE", "0")
    monkeypatch.delenv("PTXC_CUDA_ARCH", raising=False)
    model = save(cbr_model(), tmp_path / "m.onnx")
    plan = tmp_path / "m.plan"
    assert main(["compile", model, "--arch", "sm_89", "-o", str(plan)]) == 0
    out = capsys.readouterr().out
    assert "<Engine cuda" in out and "ptx: sm_89" in out
    engine = ptxc.load(plan)
    assert engine.target == "cuda" and engine.arch == "sm_89"
    assert ".target sm_89" in engine.ptx
