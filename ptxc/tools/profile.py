"""``ptxc bench --profile``: the time of each kernel, named by the ONNX nodes it computes.

    prof = profile_engine(engine, feeds, op_types={"n0": "Conv", ...})
    print(prof.format())                  # rows sorted by time: time, share, kernel, nodes, ...
    prof.chrome_trace()                   # Chrome trace-event JSON (chrome://tracing, Perfetto)

The profiling run is apart from the timed runs of ``ptxc bench`` (profiling changes what it
measures). On the cuda target each kernel is launched on its own between two CUDA timing events
(:meth:`CudaProgram.kernel_times`; no graph, so launch gaps are not counted); on the cpu target
``CpuProgram.run(on_kernel=)`` hears each kernel call's span (thread-pool splits included), and
``measured`` is the wall time of that whole run, so the rows and the run can be compared (the
difference is the host's work: binding checks, output allocation and copies).

Every row names its ONNX nodes from the kernel table's ``nodes`` (provenance through fusions,
:mod:`ptxc.rewrite.provenance`): a fused conv's row lists the Conv, BatchNormalization and Relu
it absorbed. With ``op_types`` (node name -> ONNX op type, from the model file), each node shows
its op type too.
"""

from __future__ import annotations

import attrs


@attrs.frozen
class KernelRow:
    index: int
    kernel: str
    nodes: tuple
    schedule: str | None
    grid: tuple | None
    block: tuple | None
    start: float      # seconds from the first kernel's start
    time: float       # seconds
    tactic: str | None = None   # a tuned build's tactic for the kernel (None: the heuristic's)


@attrs.frozen
class Profile:
    target: str
    rows: tuple           # KernelRow, in execution order
    measured: float       # seconds: the profiled run's wall time (cpu) or kernel span (cuda)
    op_types: dict = attrs.field(factory=dict)

    @property
    def kernel_total(self) -> float:
        return sum(r.time for r in self.rows)

    def node_label(self, node: str) -> str:
        t = self.op_types.get(node)
        return f"{node} ({t})" if t else node

    def format(self, top: int | None = None) -> str:
        total = self.kernel_total or 1e-30
        rows = sorted(self.rows, key=lambda r: -r.time)
        shown = rows if top is None else rows[:top]
        head = (f"profile ({self.target}): {len(self.rows)} kernels, {self.kernel_total * 1e3:.3f}"
                f" ms in kernels of a {self.measured * 1e3:.3f} ms run")
        lines = [head, f"{'time ms':>10} {'share':>6}  {'kernel':<11} {'schedule':<10} "
                       f"{'grid':<14} nodes"]
        for r in shown:
            grid = "x".join(map(str, r.grid)) if r.grid else "-"
            nodes = ", ".join(self.node_label(n) for n in r.nodes) or "-"
            lines.append(f"{r.time * 1e3:10.4f} {r.time / total * 100:5.1f}%  {r.kernel:<11} "
                         f"{r.schedule or '-':<10} {grid:<14} {nodes}"
                         + (f"  [tactic {r.tactic}]" if r.tactic else ""))
        if top is not None and len(rows) > top:
            rest = sum(r.time for r in rows[top:])
            lines.append(f"{rest * 1e3:10.4f} {rest / total * 100:5.1f}%  ({len(rows) - top} "
                         "more kernels)")
        return "\n".join(lines) + "\n"

    def to_json(self) -> dict:
        return {"target": self.target, "measured_ms": self.measured * 1e3,
                "kernel_total_ms": self.kernel_total * 1e3,
                "kernels": [{"kernel": r.kernel, "index": r.index, "time_ms": r.time * 1e3,
                             "nodes": [self.node_label(n) for n in r.nodes],
                             "schedule": r.schedule, "grid": r.grid, "block": r.block,
                             "tactic": r.tactic}
                            for r in sorted(self.rows, key=lambda r: -r.time)]}

    def chrome_trace(self) -> dict:
        """The Chrome trace-event format (``ph: "X"`` complete events, microseconds)."""
        events = [{"name": self.node_label(r.nodes[0]) if r.nodes else r.kernel, "cat": "kernel",
                   "ph": "X", "pid": 0, "tid": 0, "ts": r.start * 1e6, "dur": r.time * 1e6,
                   "args": {"kernel": r.kernel, "nodes": [self.node_label(n) for n in r.nodes],
                            "schedule": r.schedule, "grid": r.grid, "block": r.block}}
                  for r in self.rows]
        meta = [{"name": "process_name", "ph": "M", "pid": 0, "tid": 0,
                 "args": {"name": f"ptxc {self.target}"}}]
        return {"traceEvents": meta + events, "displayTimeUnit": "ms"}


def profile_engine(engine, feeds: dict, op_types: dict | None = None,
                   clock=None) -> Profile:
    """One profiling run of ``engine`` on host arrays ``feeds`` (see the module docstring).
    ``clock`` (cpu target): an object whose ``now()`` gives seconds (:class:`ptxc.tools.bench.
    PerfClock` unless given); the run's wall time and every kernel's span are read from it, so a
    test on a fake clock knows exactly what each row and the run should come to."""
    kernels = engine.kernels.kernels
    if engine.target == "cuda":
        times = engine.program.kernel_times(feeds)
        spans = [(s / 1e3, d / 1e3) for s, d in times]
        measured = (max(s + d for s, d in spans) - min(s for s, _ in spans)) if spans else 0.0
    else:
        from .bench import PerfClock
        clock = clock or PerfClock()
        engine.run(feeds)  # binding checks, and a warm run
        raw: list = []
        t0 = clock.now()
        engine.program(feeds, on_kernel=lambda i, a, b: raw.append((i, a, b)), clock=clock.now)
        measured = clock.now() - t0
        spans = [None] * len(kernels)
        for i, a, b in raw:
            spans[i] = (a - t0, b - a)
        spans = [s or (0.0, 0.0) for s in spans]
    rows = tuple(KernelRow(i, k.name, tuple(k.nodes or ((k.loc,) if k.loc else ())),
                           *_schedule(engine.target, k), s, d, getattr(k, "tactic", None))
                 for i, (k, (s, d)) in enumerate(zip(kernels, spans)))
    return Profile(engine.target, rows, measured, dict(op_types or {}))


def _schedule(target: str, k) -> tuple:
    """(schedule, grid, block) of a kernel: a cuda launch's own; on the cpu, whether the outer
    range is split across threads (``parallel``) or run in one call (``serial``), and its trip
    count as the grid."""
    if target == "cuda":
        return k.schedule, k.grid, k.block
    return ("parallel" if k.parallel else "serial"), (k.trip_count,), None


def onnx_op_types(path: str) -> dict:
    """Node name -> op type of an ONNX file, with the importer's names for unnamed nodes (the
    i-th node is ``{op_type}_{i}``); {} when the file does not read."""
    try:
        import onnx
        graph = onnx.load(path, load_external_data=False).graph
    except Exception:  # noqa: BLE001  (labels are a nicety; the compile reports real errors)
        return {}
    return {(n.name or f"{n.op_type}_{i}"): n.op_type for i, n in enumerate(graph.node)}
