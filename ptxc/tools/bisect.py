"""``ptxc bisect``: find the first rewrite that changes a model's result.

    result = bisect_model("model.onnx")          # graph-opt, then the later stages pass by pass
    print(result.format())                       # the pattern, the op, its ONNX node

The reference is the imported graph, interpreted (every op's numpy semantics) on seeded random
inputs. The graph stage is replayed with a budget of pattern applications
(:func:`ptxc.rewrite.driver.rewrite_budget`): with budget ``k`` the pipeline runs as usual but
every pattern driver stops after ``k`` applications in all, so the module is the graph after
exactly the first ``k`` rewrites. The full run gives the list of applications; when its result
differs from the reference beyond ``atol``/``rtol``, a binary search over ``k`` (each probe: a
fresh import, the budgeted pipeline, one interpretation) finds the smallest ``k`` whose result
differs, and application ``k`` is the culprit: its pattern, pass, op and ONNX node. This assumes
a result once wrong stays wrong (later rewrites do not cancel the error), as any bisection does;
the two neighbouring budgets are checked (``k - 1`` matches, ``k`` does not).

Passes that are not pattern rewrites (whole-module transforms) run fully at every budget; when
the graph stage is right, the later stages (tensor, loop) are checked pass by pass with
check-numerics, which names the first pass whose output differs.

Output elements that are ill-conditioned at the random inputs (rounding-level input changes move
them beyond the tolerance, in the reference or the candidate: :func:`ptxc.rewrite.numerics.
compare_modules`) are not counted as a change, at every stage; the result says how many were
left out. Without that, the light SqueezeNet (1000 equal logits of 6.8e9 under a softmax) sent
bisect after a correct lowering.
"""

from __future__ import annotations

import attrs

from ..errors import NumericsError, PtxcError


@attrs.frozen
class BisectResult:
    applications: int                 # pattern applications in the graph stage
    probes: int                       # interpretations the search took
    culprit: object = None            # the Application that first changes the result
    index: int | None = None          # its 1-based position
    mismatch: str | None = None       # what differs after it
    later: str | None = None          # a later stage's pass that changes the result
    ill_conditioned: tuple = ()       # differing outputs not compared: ill-conditioned

    @property
    def found(self) -> bool:
        return self.culprit is not None or self.later is not None

    def format(self) -> str:
        head = (f"bisect: {self.applications} pattern applications in the graph stage, "
                f"{self.probes} interpretations")
        if self.ill_conditioned:
            head += (f"\nnote: outputs {', '.join(self.ill_conditioned)} differ somewhere but "
                     "are ill-conditioned at these inputs (rounding-level input changes move "
                     "them beyond tolerance), so they were not compared there; `ptxc compare` "
                     "checks them against onnxruntime")
        if self.culprit is not None:
            c = self.culprit
            return (f"{head}\nfirst change beyond tolerance: application #{self.index} of "
                    f"{self.applications}: pattern {c.pattern} (pass {c.pass_name}) on {c.op}"
                    + (f" at ONNX node {c.loc!r}" if c.loc else "")
                    + f"\n  {self.mismatch}\n")
        if self.later is not None:
            return f"{head}\nthe graph stage is right; {self.later}\n"
        return f"{head}\nno rewrite changes the result beyond tolerance\n"


def _graph_after(proto_bytes, options, limit):
    """(module, applications) after the graph stage's own passes (``options``' graph passes:
    the layout passes run with the later stages) with at most ``limit`` pattern
    applications."""
    import attrs

    from ..compiler import as_module
    from ..pipeline import run_stages
    from ..rewrite.driver import rewrite_budget
    module = as_module(proto_bytes, **options.import_options())
    with rewrite_budget(limit) as budget:
        run_stages(module, "graph", attrs.evolve(options, layout="nchw", check_numerics=False),
                   progress=None,
                   pass_manager={"verify_each": False,
                                 "before_pass": lambda p: setattr(budget, "pass_name", p.name)})
    return module, budget.log


def bisect_model(model, *, graph_passes=None, input_shapes: dict | None = None,
                 target: str = "cpu", arch: str | None = None, options=None,
                 atol: float = 1e-4, rtol: float = 1e-3, seed: int = 0,
                 later_stages: bool = True) -> BisectResult:
    """See the module docstring. ``graph_passes``: the graph pipeline (default ``graph-opt``);
    ``target``/``arch``: the later stages' (cpu by default, as explore's: the result does not
    depend on the machine); or ``options``, a :class:`~ptxc.pipeline.CompileOptions` (fp32:
    the reference is the fp32 graph)."""
    import attrs

    from ..compiler import as_module
    from ..pipeline import CompileOptions, run_stages
    from ..rewrite import numerics
    options = CompileOptions.from_call(
        "bisect_model", options, {"graph_passes": graph_passes, "input_shapes": input_shapes,
                                  "target": target, "arch": arch}, _BISECT_DEFAULTS)
    if options.precision != "fp32":
        from ..errors import CompileError
        raise CompileError(f"bisect compares with the fp32 graph; precision "
                           f"{options.precision!r} would differ from it at every step")
    if isinstance(model, (str, bytes)) and not isinstance(model, bytes):
        with open(model, "rb") as f:  # read once: every probe imports the same bytes
            data = f.read()
    elif isinstance(model, bytes):
        data = model
    else:
        data = model.SerializeToString()
    base = as_module(data, **options.import_options())
    inputs = numerics.random_inputs(base, seed)
    reference = numerics.run(base, inputs)
    probes = 1

    left: set = set()

    def mismatch(module):
        nonlocal probes, left
        probes += 1
        try:
            out = numerics.run(module, inputs)
        except PtxcError as e:
            return f"the module no longer runs: {e}"
        msg, names = numerics.compare_modules(base, reference, module, out, inputs, rtol, atol)
        left.update(names)
        return msg

    full, log = _graph_after(data, options, None)
    bad = mismatch(full)
    if bad is None:
        later = None
        if later_stages:
            import logging
            seen = _Counting()
            logger = logging.getLogger("ptxc.check-numerics")
            logger.addHandler(seen)
            level, logger.level = logger.level, logging.INFO
            try:
                # the graph stage's own passes ran above; its layout passes run here
                run_stages(full, "loop", attrs.evolve(options, graph_passes="",
                                                      check_numerics=True),
                           pass_manager={"numerics_rtol": rtol, "numerics_atol": atol})
            except NumericsError as e:
                later = str(e)
            finally:
                logger.removeHandler(seen)
                logger.setLevel(level)
            for names in seen.names:
                left.update(names)
        return BisectResult(len(log), probes, later=later, ill_conditioned=tuple(sorted(left)))
    lo, hi = 0, len(log)          # budget lo matches (0: nothing applied), budget hi does not
    if mismatch(_graph_after(data, options, 0)[0]) is not None:
        raise PtxcError("bisect: the graph differs from the reference before any pattern "
                        "applies (a pass that is not a pattern rewrite changes it); run "
                        "`ptxc explore --check-numerics` to name the pass")
    last_msg = bad
    while hi - lo > 1:
        mid = (lo + hi) // 2
        msg = mismatch(_graph_after(data, options, mid)[0])
        if msg is None:
            lo = mid
        else:
            hi, last_msg = mid, msg
    return BisectResult(len(log), probes, log[hi - 1], hi, last_msg,
                        ill_conditioned=tuple(sorted(left)))


class _Counting:
    """A logging handler that keeps the output names of check-numerics' ill-conditioned
    records (their second argument)."""

    level = 0

    def __init__(self):
        self.names = []

    def handle(self, record) -> bool:
        if len(record.args or ()) >= 2 and isinstance(record.args[1], list):
            self.names.append(record.args[1])
        return True


#: bisect_model's defaults of the compile options it takes by keyword
_BISECT_DEFAULTS = {"graph_passes": None, "input_shapes": None, "target": "cpu", "arch": None}
