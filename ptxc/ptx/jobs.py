"""Compiling kernel modules to PTX, in this process or in several.

:func:`compile_modules` takes the per-kernel module texts of :mod:`.split` (already
deduplicated) and returns each one's PTX. Each module is parsed, verified, linked with
libdevice, optimized (NVPTX O3) and code-generated on its own; LLVM work on one module
shares nothing with another, so it runs in a pool of processes when several cores are free
(llvmlite holds one lock over all of LLVM within a process, so threads would not help).

* ``jobs`` (argument, else ``$PTXC_COMPILE_JOBS``, else the cores this process may use, at
  most 32): how many processes; 1 compiles in this process.
* Small programs stay in this process (a worker's start costs more than their codegen): the
  pool is used for at least :data:`MIN_PARALLEL_BYTES` of LLVM IR in two or more modules.
* The pool's processes are forked from a forkserver that has imported this module (so a
  worker starts in milliseconds, and no fork happens from a process running other threads);
  they end when the compile does. Largest modules go first, so the slowest kernel starts
  at once.
* The workers do not import the caller's main script (:func:`_main_hidden`): multiprocessing
  would re-run it in each of them, and a script that compiles at its top level, with no
  ``if __name__ == "__main__"`` guard, then had every worker start a compile of its own and die.

Before -> after (ResNet-50, batch 32, fp16; see bench/RESULTS.md "Compile time"): one module,
O3 + codegen of every kernel on one core -> one module per distinct kernel on every core.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import sys
import time

from ..errors import CompileError

#: below this much LLVM IR in all, modules compile in this process
MIN_PARALLEL_BYTES = 2_000_000


def default_jobs() -> int:
    env = os.environ.get("PTXC_COMPILE_JOBS")
    if env:
        try:
            n = int(env)
        except ValueError:
            raise CompileError(f"$PTXC_COMPILE_JOBS is {env!r}, not a number of processes") \
                from None
        if n < 1:
            raise CompileError(f"$PTXC_COMPILE_JOBS is {n}; it must be at least 1")
        return n
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    return max(1, min(cores, 32))


def compile_module(text: str, arch: str, opt_level: int) -> tuple[str, dict]:
    """(PTX, seconds of parse/libdevice/optimize/codegen) of one kernel module (its kernel
    named :data:`.split.PLACEHOLDER`)."""
    from . import optimize_nvptx
    from .split import PLACEHOLDER, privatize
    from .target import target_machine
    t: dict = {}
    mod = optimize_nvptx(text, arch, opt_level, [PLACEHOLDER], t)
    privatize(mod)
    t0 = time.perf_counter()
    ptx = target_machine(arch).emit_assembly(mod)
    t["codegen"] = time.perf_counter() - t0
    return ptx, t


def _work(args):
    return compile_module(*args)


def _pool_context():
    """The forkserver context where there is one (with this module preloaded), else spawn."""
    try:
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(["ptxc.ptx.jobs"])
        return ctx
    except ValueError:
        return multiprocessing.get_context("spawn")


@contextlib.contextmanager
def _main_hidden():
    """While the pool's processes start: ``__main__`` looks like an interactive session's (no
    ``__file__``, no ``__spec__``), so multiprocessing does not import the main script into
    them (``spawn.get_preparation_data``). The workers need nothing of it: they run
    :func:`_work`, which this module defines."""
    main = sys.modules.get("__main__")
    saved = {k: main.__dict__[k] for k in ("__file__", "__spec__") if main and k in main.__dict__}
    try:
        for k in saved:
            if k == "__spec__":
                main.__spec__ = None
            else:
                del main.__dict__[k]
        yield
    finally:
        if main is not None:
            main.__dict__.update(saved)


def compile_modules(texts: list[str], arch: str, opt_level: int = 3,
                    jobs: int | None = None) -> list[tuple[str, dict]]:
    """(PTX, step seconds) of each module text, in order (see the module docstring)."""
    jobs = default_jobs() if jobs is None else jobs
    if jobs < 1:
        raise CompileError(f"ptx: jobs must be at least 1, is {jobs}")
    jobs = min(jobs, len(texts))
    big = sum(len(t) for t in texts) >= MIN_PARALLEL_BYTES
    if jobs <= 1 or not big or multiprocessing.current_process().daemon:
        return [compile_module(t, arch, opt_level) for t in texts]
    return run_pool(texts, arch, opt_level, jobs)


def run_pool(texts: list[str], arch: str, opt_level: int, jobs: int) -> list[tuple[str, dict]]:
    """Compile ``texts`` in ``jobs`` processes, largest first; results in the texts' order."""
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool
    order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
    out: list = [None] * len(texts)
    try:
        with ProcessPoolExecutor(max_workers=jobs, mp_context=_pool_context()) as ex:
            with _main_hidden():  # the workers start at submit
                futures = {i: ex.submit(_work, (texts[i], arch, opt_level)) for i in order}
            for i, f in futures.items():
                out[i] = f.result()
    except BrokenProcessPool as e:
        raise CompileError(f"ptx: a code generation process died ({e}); set "
                           "PTXC_COMPILE_JOBS=1 to compile in this process") from None
    return out
