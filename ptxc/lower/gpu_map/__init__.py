"""loop -> loop + gpu: map every top-level kernel of a loop function onto a grid of thread blocks.

A kernel (a top-level ``loop.parallel``, ``loop.for`` or ``loop.copy``; loop_to_llvm's
definition) becomes a ``gpu.launch`` holding an equivalent nest written with thread and block
ids (ptxc/dialects/gpu.py). The schedules in :data:`SCHEDULES` are tried in order; each is
``schedule(op, options) -> Operation | None``: it inserts a launch before ``op`` and returns it,
or returns None when it does not apply; the pass then erases ``op``. ``options`` is the pass
instance (its fields: ``block_size``); a schedule reads what it needs with ``getattr`` and a
default. Shared helpers for schedules are in common.py.

Decisions:

* the pointwise schedule takes every kernel, so it is last and the pass always succeeds; the
  pass still checks that no top-level kernel is left and fails naming any that is;
* a nest of zero iteration points does nothing and is erased, not launched (CUDA refuses an
  empty grid);
* top-level scalar ops (constants) stay where they are: the launch body reads them, and
  loop_to_llvm re-emits top-level scalars in each kernel that uses them, as on the CPU;
* ``loc`` of each launch is that of the nest it replaces, so errors and ``inspect`` still name
  the ONNX node.

**Tactics** (auto-tuning, ptxc/tune/): the pass's ``tactics`` maps kernel keys
(:func:`ptxc.tactic.kernels.kernel_key`, computed before any kernel of the function is mapped) to
:class:`~ptxc.tactic.tactic.Tactic` values. A kernel with a tactic is mapped with the pass's
options as the tactic sets them (:meth:`Tactic.apply`) by the one schedule it names (``auto``:
all in order), and a schedule that declines it is a TuningError naming the tactic and the
kernel (:func:`schedule_kernel`). The launches of a non-default tactic (split-K's second one
too) carry ``tactic`` (its text) and ``tuning_key``. Without tactics the pass maps as it always
did. :meth:`MapToGpu.candidates` lists a kernel's candidate tactics (gpu_map/tactics.py).
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs

from ...dialects.func import func_body, functions
from ...dialects.gpu import MAX_THREADS
from ...errors import CompileError, TuningError
from ...ir.core import Operation
from ...rewrite.pass_ import Pass, register_pass
from ...target import Target
from ...tactic.kernels import kernel_key
from ...tactic.tactic import DEFAULT, Tactic
from ...tactic.tactic_map import NO_TACTICS, tactic_map
from . import mma, mma_config, mma_epilogue, pointwise, reduction, tiled, wgmma
from .common import KERNEL_OPS, parallel_space, pdl_enabled, points

#: (name, schedule) in the order they are tried
SCHEDULES = [
    ("mma", mma.schedule),
    ("tiled", tiled.schedule),
    ("reduction", reduction.schedule),
    ("pointwise", pointwise.schedule),
]


def _empty(op: Operation) -> bool:
    if op.name == "loop.parallel":
        return points(parallel_space(op)[2]) == 0
    if op.name == "loop.copy":
        return op.operands[0].type.size == 0
    return op.attributes["upper"] <= op.attributes["lower"] and not op.has_uses


def map_to_gpu(module: Operation, options=None) -> bool:
    """Replace every top-level kernel of every function of ``module`` by a gpu.launch (see the
    module docstring); returns whether anything changed."""
    changed = False
    pdl = pdl_enabled(options)
    tactics = getattr(options, "tactics", None) or {}
    for f in functions(module):
        body = func_body(f)
        # keys before any kernel is mapped: what ptxc.tactic.kernels.kernels_of gives the tuner
        keys = {id(op): kernel_key(op) for op in body.ops if op.name in KERNEL_OPS} \
            if tactics else {}
        for op in list(body.ops):
            if op.name not in KERNEL_OPS:
                continue
            changed = True
            if _empty(op):
                op.erase()
                continue
            key = keys.get(id(op))
            tactic = tactics.get(key, DEFAULT) if key is not None else DEFAULT
            if tactic != DEFAULT:
                own = tactic.apply(options)
                for launch in schedule_kernel(op, tactic, options):
                    launch.attributes["tactic"] = str(tactic)
                    launch.attributes["tuning_key"] = key
                    if pdl_enabled(own):
                        launch.attributes["pdl"] = True
                op.erase()
                continue
            for _, sched in SCHEDULES:
                if sched(op, options) is not None:
                    op.erase()
                    break
        left = [op.where for op in body.ops if op.name in KERNEL_OPS]
        if left:
            raise CompileError("map-to-gpu: no schedule took " + ", ".join(left))
        if pdl:   # every launch, a schedule's second ones too (split-K's sum of the splits)
            for op in body.ops:   # (a tactic's launches follow its own options, above)
                if op.name == "gpu.launch" and "tactic" not in op.attributes:
                    op.attributes["pdl"] = True
    return changed


def schedule_kernel(op: Operation, tactic: Tactic, options) -> list[Operation]:
    """Map the top-level kernel ``op`` as ``tactic`` says (module docstring, "Tactics"): the
    launches inserted before ``op`` (which the caller erases), or a TuningError naming the
    tactic and ``op`` where its schedule declines the kernel or is not one of
    :data:`SCHEDULES`. ``options``: the pass (None: its defaults)."""
    own = tactic.apply(options if options is not None else MapToGpu())
    names = [name for name, _ in SCHEDULES]
    if tactic.schedule != "auto" and tactic.schedule not in names:
        raise TuningError(f"tactic {tactic}: map-to-gpu has no schedule {tactic.schedule!r} "
                          f"(its schedules: {', '.join(names)}; auto: all in order)")
    block = op.block
    before = {id(o) for o in block.ops}
    for name, sched in SCHEDULES:
        if tactic.schedule in ("auto", name) and sched(op, own) is not None:
            return [o for o in block.ops if o.name == "gpu.launch" and id(o) not in before]
    raise TuningError(f"tactic {tactic}: the {tactic.schedule} schedule declines the kernel "
                      f"{op.where}")


def _check_block_size(instance, attribute, value):
    if not 1 <= value <= MAX_THREADS:
        raise ValueError(f"block-size must be in [1, {MAX_THREADS}], is {value}")


def _check_epilogue(instance, attribute, value):
    if value not in mma_epilogue.EPILOGUES:
        raise ValueError(f"mma-epilogue must be one of {', '.join(mma_epilogue.EPILOGUES)}, "
                         f"is {value!r}")


def _check_min_blocks(instance, attribute, value):
    if not isinstance(value, int) or not 0 <= value <= 32:
        raise ValueError(f"mma-min-blocks must be a count of blocks per SM in [0, 32] (0: the "
                         f"schedule's choice), is {value!r}")


def _check_stages(instance, attribute, value):
    if not isinstance(value, int) or not (value == 0 or 2 <= value <= 8):
        raise ValueError(f"mma-stages must be 0 (the schedule's choice) or 2 to 8, is {value!r}")


def _check_deep_k(instance, attribute, value):
    if not isinstance(value, int) or not 0 <= value <= 64:
        raise ValueError(f"mma-deep-k must be a count of base K tiles in [0, 64] (0: the "
                         f"schedule's {mma_config.DEEP_K}), is {value!r}")


def _check_m_tiles(instance, attribute, value):
    if not isinstance(value, int) or not 0 <= value <= 16:
        raise ValueError(f"mma-m-tiles must be a count of output tiles per CTA in [0, 16] (0: "
                         f"the schedule's choice), is {value!r}")


def _check_tiles(instance, attribute, value):
    mma_config.parse_tiles(value)


def _check_wgmma(instance, attribute, value):
    if value not in wgmma.MODES:
        raise ValueError(f"wgmma must be one of {', '.join(wgmma.MODES)}, is {value!r}")


def _check_wgmma_tiles(instance, attribute, value):
    wgmma.parse_tiles(value)


_DEFAULT_WGMMA_COPIES = wgmma.COPIES[0]   # (inside MapToGpu, ``wgmma`` is the option)
_DEFAULT_WGMMA_EPILOGUE = wgmma.DEFAULT_EPILOGUE


def _check_wgmma_copies(instance, attribute, value):
    if value not in wgmma.COPIES:
        raise ValueError(f"wgmma-copies must be one of {', '.join(wgmma.COPIES)}, is {value!r}")


def _check_min_k_tiles(instance, attribute, value):
    if not isinstance(value, int) or value < 0:
        raise ValueError(f"wgmma-min-k-tiles must be a count of K tiles >= 0, is {value!r}")


def _check_wgmma_epilogue(instance, attribute, value):
    if value not in wgmma.EPILOGUES:
        raise ValueError(f"wgmma-epilogue must be one of {', '.join(wgmma.EPILOGUES)}, is "
                         f"{value!r}")


def _check_wgmma_kinds(instance, attribute, value):
    bad = [k for k in value if k not in wgmma.KINDS]
    if bad:
        raise ValueError(f"wgmma-kinds: {bad} are not among {', '.join(wgmma.KINDS)}")


def _check_arch(instance, attribute, value):
    if value:
        from ...ptx.target import check_arch
        from ...errors import CompileError
        try:
            check_arch(value)
        except CompileError as e:
            raise ValueError(f"arch: {e}") from None


def _check_target(instance, attribute, value):
    if value is not None and not isinstance(value, Target):
        raise ValueError(f"target must be a ptxc.target.Target (set by the compile spine; in "
                         f"pipeline text name the arch: map-to-gpu{{arch=sm_89}}), is {value!r}")
    if value is not None and value.kind != "cuda":
        raise ValueError(f"target: map-to-gpu writes cuda kernels, the target is {value.kind!r}")


def _check_reduction_block(instance, attribute, value):
    if not isinstance(value, int) or not (value == 0 or (
            reduction.MIN_BLOCK <= value <= MAX_THREADS and value & (value - 1) == 0)):
        raise ValueError(f"reduction-block-size must be 0 (the schedule's choice) or a power of "
                         f"two in [{reduction.MIN_BLOCK}, {MAX_THREADS}], is {value!r}")


def _check_min_reduction(instance, attribute, value):
    if not isinstance(value, int) or value < 0:
        raise ValueError(f"tiled-min-reduction must be a count of reduction points >= 0, is "
                         f"{value!r}")


@register_pass
@attrs.frozen
class MapToGpu(Pass):
    """Map every top-level loop nest (loop.parallel, loop.for, loop.copy) to a gpu.launch, trying
    the schedules of ``SCHEDULES`` in order, pointwise last (one thread per point, the
    parallel dims collapsed into ``block_id.x * B + thread_id.x``, guarded where the grid
    overshoots). ``block-size``: the most threads per block a pointwise launch uses.
    ``mma-epilogue``: ``staged`` (default) or ``fragment``, the epilogue of every mma kernel
    (mma_epilogue.py: accumulators staged through shared memory so that stores are coalesced;
    faster than ``fragment`` on ResNet-50 fp16, bench/history/2026-12-02.md).
    ``tiled-min-reduction``: the tiled schedule declines a nest with fewer reduction points
    (the product of its reduction loops' trips), which then goes to the pointwise schedule: a
    depthwise 3x3 convolution (9 points) gains nothing from staging its operands in shared
    memory (16, the default: MobileNetV2 fp16 ran faster with its depthwise convolutions on the
    pointwise schedule, bench/history/2026-12-02.md; 0 lets the tiled schedule take every nest
    it can).
    ``wgmma``: ``auto`` (default), ``on`` or ``off``: whether large GEMMs with K-major
    operands take Hopper's warpgroup MMA (gpu_map/wgmma.py: its hand-written prototype,
    bench/wgmma_gemm.py, came closer to cuBLAS on a large GEMM than mma.sync); ``on`` takes
    every GEMM it can, whatever its size. ``wgmma-kinds`` (``[f16, s8]``; empty, the default:
    wgmma.AUTO_KINDS, both) names the element kinds ``auto`` considers. ``wgmma-tiles``
    (``[BMxBN, ...]``, BM 64 or 128; empty: wgmma.TILES, 128x256 down to 64x64) the tiles
    ``auto`` tries in order, taking the first whose grid gives two CTAs per SM (wgmma.py,
    "When"). ``wgmma-copies``: ``overlap`` (default) or ``after-wait``, where the K loop issues
    the next tile's copies (wgmma.COPIES). The defaults are the faster of each choice
    (bench/history/2026-12-03.md; current numbers in bench/RESULTS.md).
    ``wgmma-epilogue``: ``staged`` (default) or ``fragment``, the wgmma kernels' epilogue
    (wgmma.py, "Epilogue": each warp's accumulators through the mma schedule's staged region,
    for coalesced stores; faster on ResNet-50 in int8 and fp16, bench/history/2026-12-04.md).
    ``wgmma-min-k-tiles`` (0: wgmma.MIN_K_TILES's rule): ``auto`` takes a GEMM whose K spans more
    than this many K tiles less one (128 bytes of k each), whatever the tile (timing runs).
    Never on a target without wgmma (sm_90 only).
    ``target``: the machine the kernels are for (a :class:`ptxc.target.Target`, not pipeline
    text: the compile spine sets it on the pass object); every schedule reads it through
    common.target_of (SM count, shared memory per block and per SM, instruction features).
    Where it is None, ``arch`` (text, e.g. ``sm_89``) names it (``Target.resolve(arch)``: the
    arch's preset, or the GPU here where it has that arch); both unset,
    ``Target.resolve()``, what lower_to_ptx builds for. The mma.sync schedule takes a nest only
    where the target has the mma kind (sm_80 and later); below, the tiled and pointwise
    schedules take it.
    ``mma-min-blocks``: blocks per SM an mma kernel's registers must allow (``minctasm``; 0,
    the default: mma_config.min_blocks decides: 3 for warp tiles of at most 64 accumulators per
    thread, else ptxas's choice; 3 or 4 for every kernel made ResNet-50 slower in int8 and
    fp16, bench/history/2026-12-02.md; 1: ptxas's choice everywhere).
    ``mma-deep-k`` (0: mma_config.DEEP_K, 8): the K, in base K tiles (32 f16 or 64 int8 elements), from
    which mma.sync K tiles are twice as deep (for timing runs).
    ``mma-stages`` (0: the schedule's 3) and ``mma-tiles`` (``[BMxBNxWARPS_MxWARPS_N, ...]``,
    largest first; empty: mma_config.TILES): the mma.sync schedule's cp.async stages and the CTA
    tiles its heuristic picks from, for tuning runs (``bench/resnet50_int8.py --variant``).
    ``mma-m-tiles`` (0: mma_config.m_tiles decides): output tiles each mma.sync CTA computes in turn,
    the next one's copies in flight during this one's epilogue (mma.py, "M tiles"; slower
    than one tile per CTA on ResNet-50, bench/history/2026-12-03.md).
    ``mma-flat-m`` (``true``): the point program's loads and stores whose offset is linear in
    the output row take one linear index (mma_kernel.m_linear_accesses) instead of the row's
    ``(n, p, q)``: fewer integer instructions per output, since the int8 short-K kernels are
    bound by the ALU pipe (Nsight Compute); it made ResNet-50's int8 layer-1 conv3 + residual
    and downsample kernels faster (bench/history/2026-12-03.md); ``false`` keeps ``(n, p, q)``.
    ``mma-epilogue-tiles`` (``true``): the point program's tile loads (a fused residual) go
    through shared memory by cp.async where mma_prefetch.worth_it says they pay; ``false``:
    every one is a global load in the epilogue (for timing runs).
    ``pdl`` (``true``): on a target with PDL (sm_90 and later) every launch is ``pdl`` (programmatic dependent
    launch, gpu.launch's docstring): the kernel waits for its predecessors in its first
    instruction, and the runtime launches it while the one before still runs, so the launch
    and the placement of its blocks overlap that kernel's tail (:func:`pdl_enabled`).
    ``pdl-early-weights`` (``true``): there, an mma or wgmma kernel copies the first K tiles
    of its constant operand (the weights) before it waits (mma_kernel._Builder._prologue).
    ``reduction-block-size`` (0: reduction.block_size decides): the reduction schedule's
    threads per block, a power of two (for tuning runs).
    ``tactics``: kernel key -> :class:`~ptxc.tactic.tactic.Tactic` (module docstring,
    "Tactics"; a :class:`~ptxc.tactic.tactic_map.TacticMap`, not pipeline text: the compile spine
    sets it on the pass object, as ``target``); empty, the default: no kernel is tuned.
    :meth:`candidates` enumerates a kernel's tactics.
    ``index32`` (``true``): mma and wgmma launches ask for 32-bit index arithmetic
    (gpu.launch ``index_bits``, granted where every buffer is small enough; not the mma
    kernels with flat-row accesses, mma.INDEX32): a tenth less SASS in ResNet-50 b32's
    tensor-core kernels; ``false`` keeps 64 bits (for timing runs).

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
            "gpu.launch"() ({
              %0 = "gpu.thread_id"() {dim = 0} : () -> index
              %1 = "gpu.block_id"() {dim = 0} : () -> index
              %2 = "arith.constant"() {type = index, value = 256} : () -> index
              %3 = "arith.mul"(%1, %2) : (index, index) -> index
              %4 = "arith.add"(%3, %0) : (index, index) -> index
              %5 = "arith.constant"() {type = index, value = 300} : () -> index
              %6 = "arith.cmp"(%4, %5) {predicate = "lt"} : (index, index) -> i1
              "loop.if"(%6) ({
                %7 = "arith.constant"() {type = index, value = 100} : () -> index
                %8 = "arith.div"(%4, %7) : (index, index) -> index
                %9 = "arith.mul"(%8, %7) : (index, index) -> index
                %10 = "arith.sub"(%4, %9) : (index, index) -> index
                %v = "loop.load"(%x, %8, %10) : (buffer<3x100xf32>, index, index) -> f32
                %w = "arith.mul"(%v, %c) : (f32, f32) -> f32
                "loop.store"(%w, %y, %8, %10) : (f32, buffer<3x100xf32>, index, index) -> ()
                "loop.yield"() : () -> ()
              }) : (i1) -> ()
              "loop.yield"() : () -> ()
            }) {block = [256, 1, 1], grid = [2, 1, 1], pdl = true, schedule = "pointwise"} : () -> () loc("double")
            "func.return"() : () -> ()
          }) {arg_names = ["x", "y"], function_type = (buffer<3x100xf32>, buffer<3x100xf32>) -> (), loop.outputs = ["y"], sym_name = "main"} : () -> ()
        }) : () -> ()
    """

    name = "map-to-gpu"
    block_size: int = attrs.field(default=256, validator=_check_block_size)
    mma_epilogue: str = attrs.field(default=mma_epilogue.DEFAULT_EPILOGUE,
                                    validator=_check_epilogue)
    tiled_min_reduction: int = attrs.field(default=tiled.DEFAULT_MIN_REDUCTION,
                                           validator=_check_min_reduction)
    wgmma: str = attrs.field(default=wgmma.DEFAULT_MODE, validator=_check_wgmma)
    wgmma_kinds: tuple[str, ...] = attrs.field(default=(), converter=tuple,
                                               validator=_check_wgmma_kinds)
    arch: str = attrs.field(default="", validator=_check_arch)
    target: Target | None = attrs.field(default=None, validator=_check_target)
    mma_min_blocks: int = attrs.field(default=0, validator=_check_min_blocks)
    mma_stages: int = attrs.field(default=0, validator=_check_stages)
    mma_deep_k: int = attrs.field(default=0, validator=_check_deep_k)
    mma_m_tiles: int = attrs.field(default=0, validator=_check_m_tiles)
    mma_flat_m: bool = True
    mma_epilogue_tiles: bool = True
    mma_tiles: tuple[str, ...] = attrs.field(default=(), converter=tuple,
                                             validator=_check_tiles)
    pdl: bool = True
    pdl_early_weights: bool = True
    index32: bool = mma.INDEX32
    wgmma_tiles: tuple[str, ...] = attrs.field(default=(), converter=tuple,
                                               validator=_check_wgmma_tiles)
    wgmma_copies: str = attrs.field(default=_DEFAULT_WGMMA_COPIES,
                                    validator=_check_wgmma_copies)
    wgmma_epilogue: str = attrs.field(default=_DEFAULT_WGMMA_EPILOGUE,
                                      validator=_check_wgmma_epilogue)
    wgmma_min_k_tiles: int = attrs.field(default=0, validator=_check_min_k_tiles)
    reduction_block_size: int = attrs.field(default=0, validator=_check_reduction_block)
    tactics: Mapping[str, Tactic] = attrs.field(default=NO_TACTICS, converter=tactic_map)

    def __str__(self) -> str:
        """Pipeline text of the text options: the ``target`` is an object the compile spine
        sets, not text (``arch`` is its text form), and so are the ``tactics``: both are left
        out."""
        if self.target is not None or self.tactics:
            return str(attrs.evolve(self, target=None, tactics=NO_TACTICS))
        return super().__str__()

    def run(self, module: Operation) -> bool:
        return map_to_gpu(module, self)

    def candidates(self, op: Operation, level: str = "full") -> list[Tactic]:
        """The candidate tactics of the top-level kernel ``op`` (before this pass maps it) under
        this pass's options: :data:`~ptxc.tactic.tactic.DEFAULT` first, each mapping the kernel
        to other launches than every one before it; ``level`` ``fast`` (at most
        tactics.MAX_FAST) or ``full`` (at most tactics.MAX_FULL). See gpu_map/tactics.py."""
        from .tactics import candidates
        return candidates(self, op, level)
