"""check-numerics: run a module on random inputs before and after a pass and compare.

Inputs are drawn once per pipeline from a seeded generator, from the argument types of ``main``:
floats from normal(0, 1), integers from {0, 1, 2, 3} (small and non-negative, so they are valid
indices and exponents), booleans uniformly. Each interpretation gets its own copies, so an op that
writes into an argument cannot leak into the next run.

:func:`compare` takes the outputs of the module before a pass as the reference: an output that
is missing, changed shape or dtype, turned NaN where the reference was not, or is not
``allclose(after, before, rtol, atol)`` is reported with the largest absolute and relative error
and where it occurs.

**Ill-conditioned outputs.** Two correct float32 evaluations of one function can disagree far
beyond any tolerance where the function amplifies rounding: the light SqueezeNet's 1000 logits
are all 6.8e9 for these inputs, numpy's convolution rounds them a few ulps apart per channel and
its softmax puts 1/24 on the 24 largest, while the loop nest (and onnxruntime) computes every
channel in the same order and gets exactly 1/1000 everywhere. No pass is wrong there. So when a
comparison fails, :func:`compare_modules` asks both modules whether rounding-level changes of
the float inputs (1, 2 and 4 ulps, :func:`unstable`) move an output beyond the tolerance
itself; such an output is not determined by float32 arithmetic at these inputs and is not
compared (its values are still checked for new NaNs), and only a difference elsewhere is
reported. A wrong pass computes something else, stably: its differences stay. The cost (up to
six more interpretations) is paid only on a mismatch.
"""

from __future__ import annotations

import numpy as np

from ..dialects.func import arg_names, func_body, get_func
from ..errors import CompileError, NumericsError
from ..ir.core import Operation
from ..ir.interpreter import interpret


def signature(module: Operation, func: str = "main") -> list[tuple[str, object]]:
    """(binding name, type) of each input argument of ``func``."""
    try:
        f = get_func(module, func)
    except KeyError:
        raise CompileError(f"check-numerics: the module has no function {func!r} to run") \
            from None
    outputs = set(f.attributes.get("loop.outputs", ()))  # loop level: outputs are arguments
    return [(n, a.type) for n, a in zip(arg_names(f), func_body(f).args) if n not in outputs]


def random_inputs(module: Operation, seed: int = 0, func: str = "main") -> dict[str, np.ndarray]:
    """Random arrays for the arguments of ``func``; see the module docstring."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, t in signature(module, func):
        shape = tuple(getattr(t, "shape", ()))
        dtype = t.element.np_dtype if hasattr(t, "element") else t.np_dtype
        if dtype == np.bool_:
            x = rng.integers(0, 2, size=shape).astype(np.bool_)
        elif dtype.kind == "f":
            x = rng.standard_normal(size=shape).astype(dtype)
        else:
            x = rng.integers(0, 4, size=shape).astype(dtype)
        out[name] = np.asarray(x)
    return out


def conform_inputs(module: Operation, inputs: dict[str, np.ndarray],
                   func: str = "main") -> dict[str, np.ndarray]:
    """``inputs`` cast to the current argument types of ``func`` (a pass may change an input's
    element type, never its name or shape); fresh copies every time."""
    sig = signature(module, func)
    names = [n for n, _ in sig]
    if sorted(names) != sorted(inputs):
        raise NumericsError(f"the arguments of {func!r} changed from {sorted(inputs)} to "
                            f"{sorted(names)}")
    out = {}
    for name, t in sig:
        x = inputs[name]
        if tuple(getattr(t, "shape", ())) != x.shape:
            raise NumericsError(f"argument {name!r} of {func!r} changed shape from "
                                f"{list(x.shape)} to {t}")
        out[name] = np.array(x, dtype=t.element.np_dtype if hasattr(t, "element")
                             else t.np_dtype, copy=True)
    return out


def run(module: Operation, inputs: dict[str, np.ndarray], func: str = "main") -> dict:
    """Interpret ``func`` on copies of ``inputs``."""
    return interpret(module, conform_inputs(module, inputs, func), func=func)


def _mismatch(name: str, b: np.ndarray, a: np.ndarray, rtol: float, atol: float) -> str | None:
    with np.errstate(all="ignore"):
        if a.dtype.kind in "fc":
            bad = ~np.isclose(a, b, rtol=rtol, atol=atol, equal_nan=True)
        else:
            bad = a != b
        if not bad.any():
            return None
        b64, a64 = b.astype(np.float64), a.astype(np.float64)
        finite = np.isfinite(a64) & np.isfinite(b64)
        diff = np.where(finite, np.abs(a64 - b64), 0.0)
        # relative to the reference, as numpy's assert_allclose: inf where the reference is 0
        rel = np.where(diff == 0, 0.0, diff / np.where(b64 == 0, 0.0, np.abs(b64)))
        worst = np.where(bad & finite, diff, -1.0)
        i = int(np.argmax(worst)) if (bad & finite).any() else int(np.argmax(bad))
    idx = [int(k) for k in np.unravel_index(i, a.shape)]
    return (f"output {name!r} differs at {int(bad.sum())} of {a.size} elements: max abs error "
            f"{float(diff.max()):.6g}, max rel error {float(rel.max()):.6g} "
            f"(rtol={rtol}, atol={atol}); worst at index {idx}: "
            f"{str(b.reshape(-1)[i])} -> {str(a.reshape(-1)[i])}")


#: the tolerance (rtol = atol) for a module holding f16 values: a pass may move a sum's rounding
#: to f16 by one ulp (2^-11 relative) and the flip travels through the layers after it
FP16_TOLERANCE = 2e-2


def tolerances(module: Operation, rtol: float, atol: float) -> tuple[float, float]:
    """The check's (rtol, atol): as given, scaled up to :data:`FP16_TOLERANCE` when ``module``
    holds f16 tensors or buffers or tf32 products (same 10-bit mantissa) (``precision="fp16"``
    or ``"tf32"``: each pass is checked in that precision too)."""
    for op in module.walk():
        if op.name == "arith.round_tf32" or op.attributes.get("tf32") is True or \
                op.attributes.get("ptxc.precision") == "tf32":
            return max(rtol, FP16_TOLERANCE), max(atol, FP16_TOLERANCE)
        for v in list(op.results) + [a for r in op.regions for blk in r.blocks
                                     for a in blk.args]:
            if getattr(getattr(v.type, "element", v.type), "name", None) == "f16":
                return max(rtol, FP16_TOLERANCE), max(atol, FP16_TOLERANCE)
    return rtol, atol


def compare(before: dict, after: dict, rtol: float, atol: float,
            ignore=()) -> str | None:
    """None when ``after`` matches ``before``; else what differs (the first bad output).
    ``ignore``: names of outputs whose values are not compared (:func:`unstable`)."""
    for name, b in before.items():
        if name not in after:
            return f"output {name!r} is gone (outputs now: {sorted(after)})"
        a = after[name]
        if a.shape != b.shape or a.dtype != b.dtype:
            return (f"output {name!r} changed from {b.dtype}{list(b.shape)} to "
                    f"{a.dtype}{list(a.shape)}")
        if a.dtype.kind in "fc":
            new_nan = np.isnan(a) & ~np.isnan(b)
            if new_nan.any():
                idx = np.unravel_index(int(np.argmax(new_nan)), a.shape)
                return (f"output {name!r} has {int(new_nan.sum())} new NaN(s), first at index "
                        f"{list(map(int, idx))} (was {str(b[idx])})")
        if name in ignore:
            continue
        msg = _mismatch(name, b, a, rtol, atol)
        if msg:
            return msg
    extra = sorted(set(after) - set(before))
    if extra:
        return f"new output(s) {extra}"
    return None


def unstable(module: Operation, inputs: dict, outputs: dict, rtol: float, atol: float,
             func: str = "main", ulps=(1, 2, 4)) -> set:
    """The outputs of ``module`` at ``inputs`` that change beyond ``rtol``/``atol`` when every
    float input is scaled by ``1 + k * eps`` (``eps`` of its dtype; ``k`` in ``ulps``): outputs
    not determined by float arithmetic there (see the module docstring). A whole output, not its
    elements: the SqueezeNet softmax moves its mass among 48 of 1000 classes under these changes
    while the other 952 stay 0, yet another evaluation order puts 1/1000 on each. Example: a
    softmax of logits all near 6.8e9 is unstable; a conv, a relu and a softmax of logits near 1
    are not."""
    names = {n for n, v in outputs.items() if isinstance(v, np.ndarray) and v.dtype.kind == "f"}
    moved_out = set()
    for k in ulps:
        if moved_out == names:
            break
        moved = {}
        for n, x in inputs.items():
            x = np.asarray(x)
            moved[n] = (x * x.dtype.type(1 + k * np.finfo(x.dtype).eps)).astype(x.dtype) \
                if x.dtype.kind == "f" else x
        try:
            out = run(module, moved, func)
        except Exception:  # noqa: BLE001  (a module that fails here is judged as it is)
            continue
        with np.errstate(all="ignore"):
            for n in names - moved_out:
                if n in out and out[n].shape == outputs[n].shape and not np.allclose(
                        out[n], outputs[n], rtol=rtol, atol=atol, equal_nan=True):
                    moved_out.add(n)
    return moved_out


def compare_modules(before_module: Operation, before: dict, after_module: Operation,
                    after: dict, inputs: dict, rtol: float, atol: float,
                    func: str = "main") -> tuple[str | None, list]:
    """(:func:`compare` of the outputs, leaving out those either module's :func:`unstable`
    names, asked only when the plain comparison fails; the names of the differing outputs left
    out)."""
    problem = compare(before, after, rtol, atol)
    if problem is None:
        return None, []
    skip = unstable(before_module, inputs, before, rtol, atol, func) | \
        unstable(after_module, inputs, after, rtol, atol, func)
    left = sorted(n for n in skip if compare({n: before[n]}, {n: after.get(n, before[n])},
                                            rtol, atol))
    return compare(before, after, rtol, atol, ignore=skip), left
