"""The catalogue: realistic bugs, each a precise source edit, and the tests that must catch it.

A :class:`Mutation` names a file under ``ptxc/``, an exact ``old`` text that must occur there
exactly once (the runner refuses otherwise, so the catalogue cannot rot silently when the code
moves: update the entry), the ``new`` text that replaces it, and the tests (files or pytest node
ids, relative to the repository root) that must fail with the mutant in place. Keep the tests
focused: each mutant runs only its own list, stopping at the first failure.

The mutations are the mistakes people make in these parts of a compiler: off-by-one guards and
bounds, pads swapped, terms dropped from an epilogue, wrong identities for reductions, lifetimes
that touch treated as disjoint, keys that forget an order. None is an edit that merely breaks
the import; each compiles and runs, and computes something subtly wrong.

Adding one: copy an entry, check it applies (``python -m tests.mutation --check``) and that it
is killed (``python -m tests.mutation --only NAME``). If it survives, the fix is a test that
should have caught it, against an independent reference, never a weaker mutation.
"""

from __future__ import annotations

import attrs


@attrs.frozen
class Mutation:
    name: str
    file: str          # relative to ptxc/
    old: str
    new: str
    tests: tuple       # pytest node ids or files, relative to the repository root
    why: str = ""      # the bug it stands for


M = Mutation
ORDER = "tests/test_order_sensitive.py"
EXTREMES = "tests/test_reduction_extremes.py"
BN = "tests/test_bn_epsilon.py"
GUARDS = "tests/test_gpu_guards.py"
PLAN = "tests/test_memory_plan.py"
L2L = "tests/test_loop_to_llvm.py"
G2T = "tests/test_graph_to_tensor.py"
RECOG = "tests/test_pass_recognize.py"
EDGES = "tests/test_edges_and_nans.py"
PLAN_EDGES = "tests/test_memory_plan_edges.py"

CATALOGUE: tuple[Mutation, ...] = (
    # ---- graph passes -----------------------------------------------------------------------
    M("cse-sorts-list-attributes", "rewrite/passes/cse.py",
      'return ("t",) + tuple(_attr_key(x) for x in v)',
      'return ("t",) + tuple(sorted(_attr_key(x) for x in v))',
      (ORDER,),
      "CSE keys list attributes as sets: Transposes with perms [0,2,1] and [1,0,2] merge"),
    M("cse-everything-commutes", "rewrite/passes/cse.py",
      'if spec.has_trait("commutative"):\n        operands = tuple(sorted(operands, key=id))',
      'if spec.has_trait("pure"):\n        operands = tuple(sorted(operands, key=id))',
      (ORDER,),
      "CSE treats every pure op as commutative: sub(a, b) merges with sub(b, a)"),
    M("bn-fold-without-epsilon", "rewrite/passes/fold_batchnorm.py",
      's = scale / np.sqrt(var + float(op.attr("epsilon")))',
      "s = scale / np.sqrt(var)",
      (BN,),
      "BN folding divides by sqrt(var), forgetting epsilon"),
    M("bn-fold-shift-unscaled", "rewrite/passes/fold_batchnorm.py",
      "return s, beta - mean * s",
      "return s, beta - mean",
      (BN,),
      "BN folding's shift forgets to scale the mean"),
    M("transpose-compose-reversed", "rewrite/passes/cancel_transposes.py",
      "perm = tuple(p1[i] for i in p2)",
      "perm = tuple(p2[i] for i in p1)",
      (ORDER,),
      "two transposes composed in the wrong order (only visible for non-commuting perms)"),
    M("pad-noop-by-sum", "rewrite/passes/eliminate_noops.py",
      'return all(p == 0 for p in op.attr("pads"))',
      'return sum(op.attr("pads")) == 0',
      (ORDER,),
      "a Pad whose pads sum to zero (pad one side, crop the other) taken for a no-op"),
    M("concat-of-split-any-order", "rewrite/passes/eliminate_concat.py",
      "if list(op.operands[i:i + n]) != list(p.results):",
      "if set(op.operands[i:i + n]) != set(p.results):",
      (ORDER,),
      "concat(split(x)#1, split(x)#0) taken for x"),
    M("layer-norm-recognized-with-default-epsilon", "rewrite/passes/recognize/layer_norm.py",
      '{"axis": axis, "epsilon": _epsilon(eps, eps_like)})',
      '{"axis": axis, "epsilon": 1e-5})',
      (BN + "::test_a_recognized_layer_norm_keeps_the_models_epsilon",
       RECOG + "::test_layer_norm_without_gamma_gets_a_scale_of_ones"),
      "the recognized LayerNorm assumes the default epsilon instead of the model's"),

    # ---- lowerings ----------------------------------------------------------------------------
    M("conv-pads-swapped", "lower/graph_to_tensor/nn.py",
      "lo, hi = list(pads[:n]), list(pads[n:])",
      "lo, hi = list(pads[n:]), list(pads[:n])",
      (ORDER,),
      "conv pads begin/end swapped (only visible with asymmetric pads)"),
    M("max-pool-pads-with-zero", "lower/graph_to_tensor/pool.py",
      "a, _, xp = _padded(b, op, x, lowest(el))",
      "a, _, xp = _padded(b, op, x, 0.0)",
      (EXTREMES + "::test_max_pools_of_negative_maps",),
      "max pool pads with 0 like a conv: an all-negative border window gives 0"),
    M("global-max-pool-starts-at-zero", "lower/graph_to_tensor/pool.py",
      'return [reduce(b, x, list(range(2, x.type.rank)), "max", lowest(x.type.element))]',
      'return [reduce(b, x, list(range(2, x.type.rank)), "max", 0.0)]',
      (EXTREMES + "::test_max_pools_of_negative_maps",),
      "global max pool starts its running max at 0"),
    M("reduce-min-starts-at-zero", "lower/graph_to_tensor/reduce.py",
      'init = lowest(el) if kind == "max" else highest(el)',
      'init = lowest(el) if kind == "max" else 0',
      (EXTREMES + "::test_onnx_reduction_everywhere",),
      "ReduceMin starts at 0: all-positive rows give 0"),
    M("average-pool-count-off-by-one", "lower/graph_to_tensor/pool.py",
      "inside = (pos >= pb) & (pos < size + pb)",
      "inside = (pos >= pb) & (pos <= size + pb)",
      (G2T + "::test_average_pool",),
      "average pool (count_include_pad=0) counts one padded position at the high end"),
    M("llvm-loop-bound-inclusive", "lower/llvm_kernel.py",
      'b.cbranch(b.icmp_signed("<", iv, stop), inner, done)',
      'b.cbranch(b.icmp_signed("<=", iv, stop), inner, done)',
      (L2L + "::test_jit_matches_interpreter",),
      "the emitted loop runs one iteration too many"),
    M("llvm-view-offset-dropped", "lower/llvm_kernel.py",
      'lin = off if lin is None else b.add(lin, off, flags=["nsw"])',
      "lin = off if lin is None else lin",
      (L2L + "::test_jit_matches_interpreter",),
      "a view's element offset is forgotten once it has strided indices"),
    M("llvm-float-max-drops-nan", "lower/llvm_scalar.py",
      'return b.select(b.fcmp_unordered("uno", x, x), x, r)',
      "return r",
      (EDGES + "::test_compiled_float_max_min_propagate_nan_from_either_side",),
      "float max/min lose numpy's NaN propagation (llvm.maxnum semantics)"),
    M("llvm-int-max-unsigned", "lower/llvm_scalar.py",
      "cmp = b.icmp_signed if t.is_signed else b.icmp_unsigned",
      "cmp = b.icmp_unsigned",
      (L2L + "::test_jit_matches_interpreter",),
      "integer max/min compare signed values as unsigned"),
    M("bufferize-touching-boxes-disjoint", "lower/tensor_to_loop/storage.py",
      "if hi1 < lo2 or hi2 < lo1:",
      "if hi1 <= lo2 or hi2 <= lo1:",
      (EDGES + "::test_insert_slices_that_share_an_edge_element_keep_the_later_insert",),
      "two slices that share their edge element are taken as disjoint"),

    # ---- gpu schedules (map-to-gpu) -------------------------------------------------------------
    M("pointwise-guard-inclusive", "lower/gpu_map/pointwise.py",
      'cmp(b, "lt", lin, n)',
      'cmp(b, "le", lin, n)',
      (GUARDS,),
      "the pointwise guard lets thread n through: a silent out-of-bounds write on a GPU"),
    M("pointwise-grid-rounds-down", "lower/gpu_map/common.py",
      "g = max(1, -(-n_points // block))",
      "g = max(1, n_points // block)",
      (GUARDS,),
      "the grid rounds down: the last partial block of points is never computed"),
    M("reduction-max-identity-zero", "lower/gpu_map/reduction.py",
      'return -math.inf if combiner == "arith.max" else math.inf',
      'return 0.0 if combiner == "arith.max" else math.inf',
      (EXTREMES + "::test_onnx_reduction_everywhere",
       EXTREMES + "::test_every_combiner_on_every_schedule_and_the_cpu"),
      "the reduction schedule starts a float max at 0.0 instead of -inf"),
    M("reduction-min-identity-zero", "lower/gpu_map/reduction.py",
      'return -math.inf if combiner == "arith.max" else math.inf',
      'return -math.inf if combiner == "arith.max" else 0.0',
      (EXTREMES + "::test_onnx_reduction_everywhere",
       EXTREMES + "::test_every_combiner_on_every_schedule_and_the_cpu"),
      "the reduction schedule starts a float min at 0.0 instead of +inf"),
    M("reduction-int-max-identity-zero", "lower/gpu_map/reduction.py",
      'return int(info.min) if combiner == "arith.max" else int(info.max)',
      'return 0 if combiner == "arith.max" else int(info.max)',
      (EXTREMES + "::test_int_reduce_max_of_negative_rows",
       EXTREMES + "::test_every_int_combiner_on_every_schedule"),
      "the reduction schedule starts an integer max at 0"),
    M("reduction-tail-guard-inclusive", "lower/gpu_map/reduction.py",
      'tid, e.const(rem), predicate="lt"))',
      'tid, e.const(rem), predicate="le"))',
      (EXTREMES + "::test_onnx_reduction_everywhere",),
      "one thread too many runs the tail: an iteration past the row is combined in"),
    M("reduction-tree-skips-half", "lower/gpu_map/reduction.py",
      "stride = bsz // 2\n",
      "stride = bsz // 4\n",
      (EXTREMES + "::test_onnx_reduction_everywhere",),
      "the tree starts at a quarter of the block: half the partials never combine"),
    M("reduction-initial-value-dropped", "lower/gpu_map/reduction.py",
      "v = e.op(ib, comb, mapping.get(init, init), v)",
      "v = v",
      (EXTREMES + "::test_every_combiner_on_every_schedule_and_the_cpu",),
      "the reduction's start value (an epilogue term) is dropped"),
    M("tiled-edge-clamp-off-by-one", "lower/gpu_map/tiled.py",
      "raw = ix.min(raw, n - 1)",
      "raw = ix.min(raw, n)",
      (EDGES + "::test_tiled_edge_threads_read_nothing_past_a_global_operand",),
      "edge threads of a partial tile are clamped one past the last point"),
    M("tiled-tail-chunk-of-one-dropped", "lower/gpu_map/tiled.py",
      "    if rem:\n        carried = chunk(",
      "    if rem > 1:\n        carried = chunk(",
      (GUARDS + "::test_tiled_matmul_with_a_tail_chunk_of_one",),
      "a reduction tail of exactly one element is skipped"),
    M("tiled-staging-guard-off-by-one", "lower/gpu_map/tiled.py",
      "if hi >= shape[d]:",
      "if hi > shape[d]:",
      (EDGES + "::test_tiled_staging_stops_at_the_last_row_and_column",),
      "the shared-memory staging copy reads one past the end of an operand"),

    # ---- the memory planner ---------------------------------------------------------------------
    M("planner-touching-lifetimes-share", "codegen/memory_plan.py",
      "active = [j for j in active if ivs[j][1] >= ivs[i][0]]",
      "active = [j for j in active if ivs[j][1] > ivs[i][0]]",
      (PLAN_EDGES, PLAN),
      "a buffer last used at step t and one first used at t may share bytes"),
    M("planner-validate-misses-touching", "codegen/memory_plan.py",
      "return a[0] <= b[1] and b[0] <= a[1]",
      "return a[0] < b[1] and b[0] < a[1]",
      (PLAN_EDGES, PLAN),
      "validate() lets buffers whose lifetimes touch overlap"),
    M("planner-alias-does-not-extend-lifetime", "codegen/memory_plan.py",
      "max(iv[1], b.last))",
      "iv[1])",
      (PLAN_EDGES, PLAN),
      "a view used after its root's last use does not keep the root alive"),
    M("planner-bound-ignores-touching", "codegen/memory_plan.py",
      "events[l + 1] = events.get(l + 1, 0) - _align(b.size, alignment)",
      "events[l] = events.get(l, 0) - _align(b.size, alignment)",
      (PLAN_EDGES, PLAN),
      "the live-bytes lower bound frees a buffer at its last use instead of after it"),
    M("planner-first-fit-steps-back", "codegen/memory_plan.py",
      "at = max(at, e)",
      "at = e",
      (PLAN_EDGES, PLAN),
      "first fit moves its candidate offset down past a longer buffer it already cleared"),
    M("planner-align-rounds-down", "codegen/memory_plan.py",
      "return -(-n // alignment) * alignment",
      "return n // alignment * alignment",
      (PLAN,),
      "sizes rounded down to the alignment: a buffer's tail overlaps the next one"),
    M("planner-view-of-view-offset", "codegen/memory_plan.py",
      "off += cur.alias_offset",
      "off = cur.alias_offset",
      (PLAN,),
      "a view of a view gets only the innermost offset"),

    # ---- the runtime ------------------------------------------------------------------------------
    M("arena-base-misaligned", "driver/arena.py",
      "shift = (-raw.ctypes.data) % alignment",
      "shift = raw.ctypes.data % alignment",
      (PLAN + "::test_arena_base_is_aligned_whatever_numpy_returns",),
      "the arena's base is shifted the wrong way: buffers lose their alignment"),
    M("cpu-threads-drop-last-chunk", "driver/cpu.py",
      "bounds = [n * c // chunks for c in range(chunks + 1)]",
      "bounds = [n * c // chunks for c in range(chunks)]",
      (L2L + "::test_threads_give_the_same_bits",),
      "a kernel split over threads loses its last chunk of rows"),
    M("cpu-one-point-kernels-skipped", "driver/cpu.py",
      "if n <= 0:\n            return",
      "if n <= 1:\n            return",
      (L2L + "::test_jit_matches_interpreter",),
      "kernels of a single point (a scalar, a one-row nest) are never run"),
    M("plan-blob-bounds-ignore-length", "plan/format.py",
      "if off < 0 or off % ALIGN or off + n > data_bytes:",
      "if off < 0 or off % ALIGN or off > data_bytes:",
      ("tests/test_plan.py::test_blob_out_of_bounds_or_ill_formed",),
      "a plan file's blob that starts inside the blob section but runs past it is accepted"),
    M("kernel-table-first-use-overwritten", "lower/loop_to_llvm.py",
      's["first"] = index if s["first"] < 0 else s["first"]',
      's["first"] = index',
      (PLAN_EDGES + "::test_a_scratch_buffer_lives_from_its_first_kernel_to_its_last",),
      "a scratch buffer's first use is taken as its last kernel: its lifetime is cut short"),
)
