"""The cpu target's schedule pass: how each top-level kernel becomes host code, as attributes.

The cpu loop stage ends with ``cpu-schedule``, as cuda's ends with ``map-to-gpu``: the pass that
decides, per top-level kernel (a ``loop.parallel``, ``loop.for`` or ``loop.copy`` of a function,
:data:`ptxc.tactic.kernels.KERNEL_OPS`), how it is generated. On the CPU the loop nest itself is
the code; what is left to decide is what LLVM and the runtime do with it, and the pass writes
that on the kernel op:

=====================  =======================================================================
attribute              meaning (0 or absent: the default, as before this pass existed)
=====================  =======================================================================
``cpu.vector_width``   lanes LoopVectorize uses on the kernel's innermost loops (1: none);
                       0: LLVM's cost model decides
``cpu.unroll``         LoopUnroll's count for the innermost loops; 0: LLVM decides
``cpu.threads``        the chunks the runtime splits a parallel kernel's outer range into,
                       whatever its work (1: one call on the calling thread); 0: the
                       runtime's pool and its ``min_parallel_work`` rule
``tactic``             the tactic that chose them (its text), where one did
``tuning_key``         that kernel's key (:func:`ptxc.tactic.kernels.kernel_key`)
=====================  =======================================================================

loop-to-llvm puts the first two in loop metadata on the innermost loops' latches
(:mod:`ptxc.lower.llvm_loop_hints`) and the third in the kernel table
(:attr:`~ptxc.lower.kernel_table.KernelInfo.threads`), which plans store and
:meth:`ptxc.driver.cpu.CpuProgram._run_kernel` reads.

**Options.** ``vector-width``, ``unroll``, ``threads`` (pipeline text, e.g.
``cpu-schedule{unroll=4}``) apply to every kernel. ``tactics`` (kernel key -> :class:`~ptxc.
tactic.tactic.Tactic`; not pipeline text: the compile spine sets it) chooses per kernel: the
pass computes each kernel's key before it changes anything, and a kernel with a tactic gets the
pass's options with the tactic's params set (:meth:`Tactic.apply`), plus the ``tactic`` and
``tuning_key`` attributes. The schedules a tactic may name are :data:`SCHEDULES` (``auto``, the
heuristic, and ``cpu``, the one schedule; both mean the same here). ``target`` (the cpu
:class:`~ptxc.target.Target`) is set by the compile spine like map-to-gpu's and left out of the
pipeline text. With the default options and no tactics the pass writes nothing: a build
without tuning is the build of before, to the byte.

**Candidates.** :meth:`CpuSchedule.candidates` lists the tactics worth timing for one kernel,
:data:`~ptxc.tactic.tactic.DEFAULT` first (see there for what is pruned, and why).
"""

from __future__ import annotations

import functools
import itertools
import os
from collections.abc import Mapping

import attrs

from ..dialects.func import func_body, functions
from ..errors import TuningError
from ..ir.core import Operation
from ..rewrite.pass_ import Pass, register_pass
from ..target import Target
from ..tactic.kernels import KERNEL_OPS, kernel_key
from ..tactic.tactic import DEFAULT, Tactic
from ..tactic.tactic_map import NO_TACTICS, tactic_map

VECTOR_WIDTH_ATTR = "cpu.vector_width"
UNROLL_ATTR = "cpu.unroll"
THREADS_ATTR = "cpu.threads"
TACTIC_ATTR = "tactic"
KEY_ATTR = "tuning_key"
#: option field -> the kernel attribute it becomes
_ATTRS = {"vector_width": VECTOR_WIDTH_ATTR, "unroll": UNROLL_ATTR, "threads": THREADS_ATTR}
#: the schedules a tactic may name: the heuristic's name and the one cpu schedule
SCHEDULES = ("auto", "cpu")
VECTOR_WIDTHS = (0, 1, 2, 4, 8, 16, 32)
MAX_UNROLL = 16
#: the unroll counts :meth:`CpuSchedule.candidates` tries
UNROLLS = (1, 2, 4, 8)
LEVELS = ("fast", "full")


def cpu_hints(op: Operation) -> dict:
    """The loop hints of kernel ``op``'s attributes, as :class:`ptxc.lower.llvm_kernel._Kernel`
    takes them (``{"vector_width": W, "unroll": U}``, the non-zero ones)."""
    hints = {"vector_width": int(op.attributes.get(VECTOR_WIDTH_ATTR, 0)),
             "unroll": int(op.attributes.get(UNROLL_ATTR, 0))}
    return {k: v for k, v in hints.items() if v}


@functools.lru_cache(maxsize=None)
def _host_features() -> frozenset:
    import llvmlite.binding as llvm
    flags = llvm.get_host_cpu_features().flatten().split(",")
    return frozenset(f[1:] for f in flags if f.startswith("+"))


def host_vector_lanes(features=None) -> int:
    """f32 lanes of the host's widest vector registers: 16 with AVX-512 (``avx512f``), 8 with
    AVX2, else 4 (SSE, NEON). ``features``: a set of feature names (default: this host's, from
    llvmlite)."""
    features = _host_features() if features is None else features
    return 16 if "avx512f" in features else 8 if "avx2" in features else 4


def pool_size() -> int:
    """The threads of the CPU runtime's pool (:func:`ptxc.driver.cpu._pool`: one per core)."""
    return os.cpu_count() or 1


# ---- what a kernel's code will loop over -------------------------------------------------------

def _trip(lo: int, hi: int, step: int) -> int:
    return max(0, -(-(hi - lo) // step))


def _own_trips(op: Operation, top: bool) -> list:
    """The trip counts of the loops ``op`` itself emits, outermost first (llvm_kernel.nest:
    one loop per dimension; a top-level kernel of no dimensions, one loop of one iteration;
    an unrolled ``loop.for`` none)."""
    if op.name == "loop.for":
        if op.attr("unroll") and not top:
            return []
        return [_trip(op.attributes["lower"], op.attributes["upper"], op.attr("step"))]
    if op.name == "loop.parallel":
        lo, hi = op.attributes["lower"], op.attributes["upper"]
        trips = [_trip(a, b, s) for a, b, s in zip(lo, hi, op.attr("step") or (1,) * len(lo))]
    elif op.name == "loop.copy":
        trips = list(op.operands[0].type.shape)
    else:
        return []
    return trips or ([1] if top else [])


def innermost_loops(op: Operation, top: bool = True) -> list:
    """``(trip count, ordered)`` of each innermost loop the code of kernel ``op`` runs (a loop
    whose body holds no loop), as loop-to-llvm emits them; ``ordered``: a ``loop.for
    {ordered}``, which takes no vector width (llvm_kernel._Kernel.loop)."""
    inner = []
    if op.name in ("loop.for", "loop.parallel"):
        for o in op.regions[0].blocks[0].ops:
            inner += innermost_loops(o, top=False)
    if inner:
        return inner
    own = _own_trips(op, top)
    ordered = op.name == "loop.for" and bool(op.attr("ordered"))
    return [(t, ordered) for t in own[-1:]]


def innermost_trips(op: Operation) -> list:
    """The trip counts of :func:`innermost_loops`."""
    return [t for t, _ in innermost_loops(op)]


def _check_vector_width(instance, attribute, value):
    if value not in VECTOR_WIDTHS or isinstance(value, bool):
        raise ValueError(f"vector-width must be one of {', '.join(map(str, VECTOR_WIDTHS))} "
                         f"(0: LLVM's choice, 1: no vectorization), is {value!r}")


def _check_unroll(instance, attribute, value):
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= MAX_UNROLL:
        raise ValueError(f"unroll must be a count in [0, {MAX_UNROLL}] (0: LLVM's choice), is "
                         f"{value!r}")


def _check_threads(instance, attribute, value):
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"threads must be a count >= 0 (0: the runtime's choice), is {value!r}")


def _check_target(instance, attribute, value):
    if value is not None and not isinstance(value, Target):
        raise ValueError(f"target must be a ptxc.target.Target (set by the compile spine), is "
                         f"{value!r}")
    if value is not None and value.kind != "cpu":
        raise ValueError(f"target: cpu-schedule schedules cpu kernels, the target is "
                         f"{value.kind!r}")


@register_pass
@attrs.frozen
class CpuSchedule(Pass):
    """Set each top-level kernel's CPU schedule (vector width, unroll count, threads) as
    attributes on it, from the options and, per kernel, the ``tactics`` (see
    :mod:`ptxc.lower.cpu_schedule`). ``vector-width`` (0, 1, 2, 4, 8, 16 or 32; 0: LLVM's
    choice, 1: no vectorization), ``unroll`` (0 to 16; 0: LLVM's choice) and ``threads`` (>= 0;
    0: the runtime's pool and ``min_parallel_work`` rule) apply to every kernel; only the
    non-zero ones are written. ``tactics`` (kernel key -> Tactic) and ``target`` are set by the
    compile spine and are not pipeline text. With the defaults the pass changes nothing.

    Options: vector-width=8 unroll=4 threads=2
    Before:
        "builtin.module"() ({
          "func.func"() ({
          ^bb0(%x: buffer<3x100xf32>, %y: buffer<3x100xf32>):
            %c = "arith.constant"() {type = f32, value = 2.0} : () -> f32
            "loop.parallel"() ({
            ^bb0(%i: index, %j: index):
              %v = "loop.load"(%x, %i, %j) : (buffer<3x100xf32>, index, index) -> f32
              %w = "arith.mul"(%v, %c) : (f32, f32) -> f32
              "loop.store"(%w, %y, %i, %j) : (f32, buffer<3x100xf32>, index, index) -> ()
              "loop.yield"() : () -> ()
            }) {lower = [0, 0], upper = [3, 100]} : () -> () loc("double")
            "func.return"() : () -> ()
          }) {arg_names = ["x", "y"], function_type = (buffer<3x100xf32>, buffer<3x100xf32>) -> (), loop.outputs = ["y"], sym_name = "main"} : () -> ()
        }) : () -> ()
    After:
        "builtin.module"() ({
          "func.func"() ({
          ^bb0(%x: buffer<3x100xf32>, %y: buffer<3x100xf32>):
            %c = "arith.constant"() {type = f32, value = 2.0} : () -> f32
            "loop.parallel"() ({
            ^bb0(%i: index, %j: index):
              %v = "loop.load"(%x, %i, %j) : (buffer<3x100xf32>, index, index) -> f32
              %w = "arith.mul"(%v, %c) : (f32, f32) -> f32
              "loop.store"(%w, %y, %i, %j) : (f32, buffer<3x100xf32>, index, index) -> ()
              "loop.yield"() : () -> ()
            }) {cpu.threads = 2, cpu.unroll = 4, cpu.vector_width = 8, lower = [0, 0], upper = [3, 100]} : () -> () loc("double")
            "func.return"() : () -> ()
          }) {arg_names = ["x", "y"], function_type = (buffer<3x100xf32>, buffer<3x100xf32>) -> (), loop.outputs = ["y"], sym_name = "main"} : () -> ()
        }) : () -> ()
    """

    name = "cpu-schedule"
    vector_width: int = attrs.field(default=0, validator=_check_vector_width)
    unroll: int = attrs.field(default=0, validator=_check_unroll)
    threads: int = attrs.field(default=0, validator=_check_threads)
    target: Target | None = attrs.field(default=None, validator=_check_target)
    tactics: Mapping[str, Tactic] = attrs.field(default=NO_TACTICS, converter=tactic_map)

    def __str__(self) -> str:
        """Pipeline text of the text options: ``target`` and ``tactics`` are objects the
        compile spine sets, not text, so they are left out."""
        opts = [f"{f.replace('_', '-')}={getattr(self, f)}" for f in _ATTRS if getattr(self, f)]
        return self.name + ("{" + " ".join(opts) + "}" if opts else "")

    def run(self, module: Operation) -> bool:
        changed = False
        for f in functions(module):
            kernels = [op for op in func_body(f).ops if op.name in KERNEL_OPS]
            # every key before any attribute is written (the attributes are in the key's text)
            keys = [kernel_key(op) for op in kernels] if self.tactics else [None] * len(kernels)
            for op, key in zip(kernels, keys):
                tactic = self.tactics.get(key) if key is not None else None
                options = self if tactic is None else self.for_tactic(tactic, op)
                changed |= _annotate(op, options, tactic, key)
        return changed

    def for_tactic(self, tactic: Tactic, op: Operation) -> "CpuSchedule":
        """The pass's options for kernel ``op`` under ``tactic``; a TuningError naming the
        tactic and the kernel where the tactic names another schedule or a bad option."""
        if tactic.schedule not in SCHEDULES:
            raise TuningError(f"cpu-schedule: tactic {tactic} for {op.where} names schedule "
                              f"{tactic.schedule!r}; the cpu schedules are "
                              f"{', '.join(SCHEDULES)}")
        try:
            return tactic.apply(self)
        except TuningError as e:
            raise TuningError(f"cpu-schedule: {op.where}: {e}") from None

    def candidates(self, op: Operation, level: str = "full") -> list[Tactic]:
        """The tactics worth timing for the top-level kernel ``op``, :data:`DEFAULT` first, in
        a fixed order; each other one is ``Tactic("cpu", {...})`` with only non-zero params.

        The values: vector widths the powers of two up to the host's f32 lanes
        (:func:`host_vector_lanes`: 16 with AVX-512, 8 with AVX2, else 4), unroll counts
        :data:`UNROLLS`, threads 1 and the pool's size (:func:`pool_size`). ``full``: every
        combination of them and of 0 (the default) per option, pruned of what cannot matter:
        no vector width or unroll count where every innermost loop of the kernel's code runs
        at most once (:func:`innermost_loops`), no vector width over 1 where each of those
        loops is ordered (it would not be given), no threads for a sequential ``loop.for``
        kernel, a kernel of one outer iteration, or a pool of one thread (then 1 is the
        default). ``fast`` (at most 6, each a subset of ``full``): the default, the widest and
        half the widest vector width, unroll 1 and 4, and threads 1 where threads apply."""
        if level not in LEVELS:
            raise TuningError(f"cpu-schedule: candidates level {level!r}; the levels are "
                              f"{', '.join(LEVELS)}")
        if op.name not in KERNEL_OPS:
            raise TuningError(f"cpu-schedule: {op.where} is no top-level kernel "
                              f"({', '.join(KERNEL_OPS)})")
        lanes = host_vector_lanes()
        loops = [ordered for t, ordered in innermost_loops(op) if t > 1]
        looping = bool(loops)
        widths = tuple(w for w in VECTOR_WIDTHS if 1 <= w <= (1 if all(loops) else lanes)) \
            if looping else ()
        unrolls = UNROLLS if looping else ()
        outer = _own_trips(op, top=True)
        threads = (1, pool_size()) if (op.name != "loop.for" and outer and outer[0] > 1
                                       and pool_size() > 1) else ()
        if level == "fast":
            picks = [{"vector_width": w} for w in (lanes, lanes // 2) if w in widths] \
                + [{"unroll": u} for u in (1, 4) if u in unrolls] \
                + [{"threads": 1} for t in threads[:1]]
        else:
            picks = [{k: v for k, v in zip(("vector_width", "unroll", "threads"), combo) if v}
                     for combo in itertools.product((0,) + widths, (0,) + unrolls,
                                                    (0,) + threads)]
        out = [DEFAULT]
        for params in picks:
            t = Tactic("cpu", params) if params else DEFAULT
            if t not in out:
                out.append(t)
        return out


def _annotate(op: Operation, options: CpuSchedule, tactic: Tactic | None,
              key: str | None) -> bool:
    """Write ``options``' non-zero schedule values on kernel ``op`` (and ``tactic``/
    ``tuning_key`` where a tactic chose them: then the kernel's schedule is exactly the
    tactic's, and a ``cpu.*`` attribute left from before that it does not set goes); whether
    an attribute changed."""
    want = {a: getattr(options, f) for f, a in _ATTRS.items() if getattr(options, f)}
    changed = False
    if tactic is not None:
        want.update({TACTIC_ATTR: str(tactic), KEY_ATTR: key})
        for a in _ATTRS.values():
            if a not in want and a in op.attributes:
                del op.attributes[a]
                changed = True
    for a, v in want.items():
        if op.attributes.get(a) != v:
            op.attributes[a] = v
            changed = True
    return changed
