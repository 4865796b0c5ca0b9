"""Tolerances scaled to the computation, for property tests that compare two float32 evaluations
of one graph (before and after a pass, interpreted and compiled).

Why not one fixed ``rtol=1e-4, atol=1e-5``: two evaluations that associate a sum differently
differ by up to about ``n * eps * M`` in absolute terms, where ``n`` is the number of terms of the
longest reduction and ``M`` the magnitude of the values summed -- not of the result. Where a
result is small because of cancellation (``x - mean`` in a LayerNorm, ``a - b`` of two similar
branches) a fixed ``atol`` is then too tight, and a test that passes on most random draws fails
on a rare one: a flaky test (issue 14: 2.9e-5 against 1e-5 on clean code). Normalizations can
also amplify such differences (dividing by a small standard deviation); that is measured rather
than guessed: the graph is run again on inputs moved by one float32 ulp, and the change it shows
is how much float32 rounding of the inputs alone moves the outputs.

:func:`scaled_tolerance` returns ``(rtol, atol)``::

    rtol = max(1e-4, 8 * n * eps)
    atol = max(1e-5, 8 * n * eps * M, 64 * S)

with ``eps`` float32's machine epsilon, ``n`` the longest reduction (:func:`longest_reduction`),
``M`` the largest magnitude of any value the graph computes on these inputs, and ``S`` the largest
output change under one-ulp input perturbations (two random sign patterns). The floors are the
usual fixed tolerances, so a well-conditioned small graph is held to exactly what it was before.
A real bug (a dropped epsilon, a wrong identity, a swapped pad) moves results by far more than
any of these terms.
"""

from __future__ import annotations

import numpy as np

from ptxc.dialects.func import get_func
from ptxc.ir.interpreter import Interpreter
from ptxc.rewrite import numerics

EPS = float(np.finfo(np.float32).eps)


def _size(v) -> int:
    shape = getattr(v.type, "shape", None)
    return int(np.prod(shape)) if shape is not None else 1


def longest_reduction(module) -> int:
    """An upper bound on the number of terms one output element of one op combines: the
    largest ratio of an operand's size to the result's (reductions, pools, softmax, norms), and
    for ops with a weight-like second operand of rank >= 2 the size of its non-leading dims (a
    conv's ``C/g * kh * kw``, a matmul's ``K`` or ``N``); at least 1."""
    n = 1
    for op in module.walk():
        if not op.results or not op.name.startswith("graph."):
            continue
        out = max(1, max(_size(r) for r in op.results))
        sizes = [_size(v) for v in op.operands if hasattr(v.type, "shape")]
        if sizes:
            n = max(n, max(sizes) // out)
        if len(op.operands) >= 2 and hasattr(op.operands[1].type, "shape"):
            shape = op.operands[1].type.shape
            if len(shape) >= 2:
                n = max(n, int(np.prod(shape[1:])), int(shape[0]))
    return n


def _values(module, inputs: dict) -> tuple[dict, float]:
    """The outputs of ``main`` on ``inputs`` and the largest finite float magnitude among all
    the values computed on the way."""
    f = get_func(module, "main")
    args = list(numerics.conform_inputs(module, inputs).values())
    names = [n for n, _ in numerics.signature(module)]
    by_name = dict(zip(names, args))
    interp = Interpreter()
    outs = interp.run_func(f, [by_name[n] for n in names])
    big = 0.0
    for x in list(interp.env.values()) + list(outs):
        a = np.asarray(x)
        if a.dtype.kind == "f" and a.size:
            fin = np.abs(a[np.isfinite(a)])
            if fin.size:
                big = max(big, float(fin.max()))
    return [np.asarray(o) for o in outs], big


def scaled_tolerance(module, inputs: dict, rtol: float = 1e-4, atol: float = 1e-5,
                     seed: int = 0) -> tuple[float, float]:
    """``(rtol, atol)`` for comparing float32 evaluations of ``module`` (graph dialect, before
    the pass under test) on ``inputs``; see the module docstring."""
    n = longest_reduction(module)
    base, big = _values(module, inputs)
    rng = np.random.default_rng(seed)
    sens = 0.0
    for _ in range(2):
        moved = {}
        for k, x in inputs.items():
            x = np.asarray(x)
            if x.dtype.kind == "f":
                step = np.spacing(np.abs(x).astype(x.dtype)) * rng.choice([-1, 1], x.shape)
                x = (x + step.astype(x.dtype)).astype(x.dtype)
            moved[k] = x
        outs, _ = _values(module, moved)
        for a, b in zip(outs, base):
            if a.dtype.kind == "f" and a.size:
                d = np.abs(a.astype(np.float64) - b.astype(np.float64))
                d = d[np.isfinite(d)]
                if d.size:
                    sens = max(sens, float(d.max()))
    return max(rtol, 8 * n * EPS), max(atol, 8 * n * EPS * big, 64 * sens)


def numerics_options(module, seed: int = 0) -> dict:
    """PassManager options (``numerics_rtol``, ``numerics_atol``) for check-numerics on
    ``module``, scaled for the inputs check-numerics draws (``numerics.random_inputs``)."""
    r, a = scaled_tolerance(module, numerics.random_inputs(module, seed))
    return {"numerics_rtol": r, "numerics_atol": a}


__all__ = ["EPS", "longest_reduction", "scaled_tolerance", "numerics_options"]
