"""The tuner: for every kernel of a loop module, the tactic to generate it with.

    tuner = Tuner(target, level="fast", cache=TimingCache.load(path))
    tactics = tuner.choose_tactics(module, schedule_pass)   # {kernel key: Tactic}
    tuner.report                                            # one row per distinct kernel

It runs where the compile spine reaches the target's schedule pass (cuda ``map-to-gpu``, cpu
``cpu-schedule``; :func:`ptxc.pipeline.run_stages`), on the module the passes before it made.
Per distinct kernel key (:mod:`ptxc.tactic.kernels`; a ResNet-50's 75 cuda kernels have 41):

1. **the timing cache** (:mod:`ptxc.tune.cache`): an entry for this device and key gives the
   tactic, re-validated by applying it to the kernel through the schedule pass (a tactic that
   no longer applies, say from another ptxc, is logged and skipped: never a wrong kernel);
2. else, where this process can measure on the target (cpu: always; cuda: a GPU here that is
   the compile's target), **tuning** (:func:`tune_kernel`): the schedule pass's candidates
   (``candidates(op, level)``, the default first), each built (:func:`ptxc.tune.measure.
   build_candidate`, in a process pool), run on synthetic inputs, its outputs compared with the
   default's and then timed; :func:`choose` keeps the fastest valid one. The result joins the
   cache;
3. else **the heuristic** (the default tactic), and the tuner says so in its log and report.

The budget (``budget_s``): once spent, the remaining kernels take steps 1 and 3 only. Progress:
a line every few seconds on stderr (kernels done/total, elapsed, ETA), as calibration's.

Why per distinct key and not per layer: the key is the kernel's code and shapes, so twins get
the same tactic by construction, and a second model reuses the first one's cache entries for
the layers they share.
"""

from __future__ import annotations

import logging
import sys
import time

import attrs

from ..errors import TuningError
from .measure import (Bench, build_candidate, compare_outputs, median, spill_reason,
                      synthetic_inputs)
from ..tactic.tactic import DEFAULT, Tactic

log = logging.getLogger("ptxc.tune")

LEVELS = ("off", "fast", "full")
#: runs timed per candidate (after a warm-up of 3), by level
RUNS = {"fast": 10, "full": 30}
#: a candidate replaces the default only when its median is this much faster (timing noise
#: must not trade a known kernel for one that only looked faster once)
MARGIN = 0.01


def check_level(level: str) -> str:
    if level not in LEVELS:
        raise TuningError(f"tuning={level!r}: the levels are {', '.join(LEVELS)}")
    return level


@attrs.frozen
class Measured:
    """One candidate's result: ``index`` in the candidate list (0: the default), its
    ``times`` (seconds) or the ``error`` that rejected it."""

    tactic: Tactic
    index: int
    times: tuple = ()
    error: str | None = None

    @property
    def median(self) -> float:
        return median(list(self.times))


def choose(measured: list[Measured], margin: float = MARGIN) -> Measured:
    """The winner among ``measured`` (``measured[0]`` the default, which must be valid): the
    valid candidate of least median time, ties to the lower index; the default unless that one
    is faster by more than ``margin``. Deterministic: equal inputs, equal choice."""
    default = measured[0]
    if default.error is not None or not default.times:
        raise TuningError(f"the default tactic failed: {default.error}")
    valid = [m for m in measured if m.error is None and m.times]
    best = min(valid, key=lambda m: (m.median, m.index))
    return best if best.median < default.median * (1.0 - margin) else default


@attrs.frozen
class Row:
    """The tuner's record of one distinct kernel (``ptxc inspect`` shows these)."""

    key: str
    loc: str | None
    kernels: int            # how many kernels of the module have this key
    tactic: Tactic
    source: str             # "tuned", "cache" or "heuristic"
    time_s: float | None = None
    default_time_s: float | None = None
    candidates: int = 0
    rejected: tuple = ()

    def to_json(self) -> dict:
        d = attrs.asdict(self, recurse=False)
        d["tactic"] = str(self.tactic)
        d["rejected"] = list(self.rejected)
        return d


def tune_kernel(kernel_text: str, key: str, pass_text: str, target: dict,
                candidates: list[dict], runs: int, pool=None, timer=None) -> dict:
    """Measure ``candidates`` (``Tactic.to_json`` dicts, the default first) of one isolated
    kernel on this process's device and choose (:func:`choose`); plain data in and out, so it
    runs here, in a worker pinned to one GPU, or as a Ray task. Returns ``{"tactic", "time_s",
    "default_time_s", "candidates", "rejected"}``. ``timer(tactic, bench, inputs, runs)``
    replaces the device timing (tests: a fake timer). ``pool``: a process pool to build the
    candidates in (:func:`build_pool`; None: here)."""
    arts = _build_all(kernel_text, key, pass_text, target, candidates, pool)
    measured, reference, inputs = [], None, None
    for i, (tj, art) in enumerate(zip(candidates, arts)):
        tactic = Tactic.from_json(tj)
        if isinstance(art, Exception):
            measured.append(Measured(tactic, i, error=f"build: {art}"))
            continue
        spilled = spill_reason(art) if i > 0 else None   # (the default is always a candidate)
        if spilled is not None:
            measured.append(Measured(tactic, i, error=spilled))
            continue
        try:
            bench = Bench.for_artifact(art)
            if inputs is None:
                inputs = synthetic_inputs(art)
            outs = bench.outputs(inputs)
            if reference is None:
                reference = outs if i == 0 else None
            why = compare_outputs(reference, outs) if i > 0 and reference is not None else None
            if why is not None:
                measured.append(Measured(tactic, i, error=f"wrong output: {why}"))
                continue
            times = timer(tactic, bench, inputs, runs) if timer is not None else \
                bench.times(inputs, runs=runs)
            measured.append(Measured(tactic, i, tuple(times)))
            bench.close()
        except Exception as e:  # noqa: BLE001  (a candidate that fails to load or run loses)
            measured.append(Measured(tactic, i, error=f"{type(e).__name__}: {e}"))
    best = choose(measured)
    rejected = [f"{m.tactic}: {m.error}" for m in measured if m.error is not None]
    for r in rejected:
        if "wrong output" in r:
            log.warning("tuning kernel %s: candidate rejected, %s", key, r)
    return {"tactic": best.tactic.to_json(), "time_s": best.median,
            "default_time_s": measured[0].median,
            "candidates": sum(1 for m in measured if m.error is None), "rejected": rejected}


def _build_all(kernel_text, key, pass_text, target, candidates, pool=None) -> list:
    """Each candidate's Artifact (or the exception that stopped its build), in order; in
    ``pool`` (a process pool, :func:`build_pool`) where given, else here."""
    args = [(kernel_text, key, pass_text, target, c) for c in candidates]
    if pool is not None and len(args) > 1:
        from ..ptx.jobs import _main_hidden
        with _main_hidden():   # workers start at submit: they must not re-run the main script
            futs = [pool.submit(build_candidate, *a) for a in args]
        return [_result(f) for f in futs]
    out = []
    for a in args:
        try:
            out.append(build_candidate(*a))
        except Exception as e:  # noqa: BLE001  (a candidate that does not build loses)
            out.append(e)
    return out


def build_pool(jobs: int):
    """A process pool for candidate builds (None where one process will do: ``jobs`` 1, or
    inside a pool's worker already), kept for a whole tuning run: workers start once."""
    import concurrent.futures as cf
    import multiprocessing

    from ..ptx.jobs import _pool_context
    if jobs <= 1 or multiprocessing.current_process().daemon:
        return None
    return cf.ProcessPoolExecutor(jobs, mp_context=_pool_context())


def _result(fut):
    try:
        return fut.result()
    except Exception as e:  # noqa: BLE001
        return e


class Tuner:
    """See the module docstring. ``level``: ``fast`` or ``full`` (``off``: cache and heuristic
    only, what a compile with a timing cache and no tuning does); ``cache``: a TimingCache or
    None; ``budget_s``: seconds for measuring (None: no limit); ``jobs``: processes building
    candidates (default: the compile's, ``ptxc.ptx.jobs.default_jobs``); ``can_measure``:
    whether this process may time kernels on ``target`` (default: cpu, or the GPU here is the
    target's); ``executor``: where to measure (:mod:`ptxc.tune.executors`; default: every GPU
    of this host where it has several, else here); ``timer``: a fake timer (tests, measuring
    here); ``progress``: lines on stderr."""

    def __init__(self, target, level: str = "fast", cache=None, budget_s: float | None = None,
                 jobs: int | None = None, can_measure: bool | None = None, executor=None,
                 timer=None, progress: bool = True, stream=None):
        from ..ptx.jobs import default_jobs
        self.target = target
        self.level = check_level(level)
        self.cache = cache
        self.budget_s = budget_s
        self.jobs = default_jobs() if jobs is None else jobs
        self.can_measure = _can_measure(target) if can_measure is None else can_measure
        self.executor = executor
        self.timer = timer
        self.progress = progress
        self.stream = stream if stream is not None else sys.stderr
        self.report: list[Row] = []

    def choose_tactics(self, module, schedule_pass) -> dict:
        """``{kernel key: Tactic}`` for the top-level kernels of ``module`` (before
        ``schedule_pass`` ran), per the module docstring; fills :attr:`report`."""
        from ..tactic.kernels import kernels_of
        groups: dict[str, list] = {}
        for k in kernels_of(module):
            groups.setdefault(k.key, []).append(k)
        rows: dict[str, Row] = {}
        for key, ks in groups.items():
            row = self._from_cache(key, ks[0], len(ks), schedule_pass)
            if row is not None:
                rows[key] = row
        todo = [key for key in groups if key not in rows]
        if todo and self.level != "off" and self.can_measure:
            self._measure(todo, groups, schedule_pass, rows)
        self.report = [rows.get(key) or Row(key, ks[0].loc, len(ks), DEFAULT, "heuristic")
                       for key, ks in groups.items()]
        self._summary()
        return {r.key: r.tactic for r in self.report if r.tactic != DEFAULT}

    # ---- steps ------------------------------------------------------------------------------
    def _from_cache(self, key, kernel, count, schedule_pass) -> Row | None:
        if self.cache is None:
            return None
        entry = self.cache.get(self.target, key)
        if entry is None:
            return None
        try:
            _validate(entry.tactic, kernel, key, schedule_pass)
        except TuningError as e:
            log.warning("timing cache: the entry for kernel %s (%s) is skipped: %s", key,
                        kernel.loc, e)
            return None
        return Row(key, kernel.loc, count, entry.tactic, "cache", entry.time_s,
                   entry.default_time_s, entry.candidates, tuple(entry.rejected))

    def _measure(self, keys, groups, schedule_pass, rows) -> None:
        """Tune the kernels ``keys`` on the executor; each result joins ``rows`` and the
        cache as it arrives."""
        from ..ir.printer import print_ir
        from . import executors
        base = _pass_text(schedule_pass)
        deadline = None if self.budget_s is None else time.time() + self.budget_s
        tasks = []
        for key in keys:
            k = groups[key][0]
            cands = schedule_pass.candidates(k.op, self.level)
            if not cands or cands[0] != DEFAULT:
                raise TuningError(f"{schedule_pass.name}.candidates must list the default "
                                  f"first (kernel {key}, {k.loc})")
            tasks.append(executors.task(print_ir(k.module), key, base, self.target.to_dict(),
                                        [c.to_json() for c in cands], RUNS[self.level],
                                        self.jobs, deadline))
        executor = self.executor or _default_executor(self.target, self.timer)
        t0 = time.perf_counter()
        for n, (i, res) in enumerate(executor.run(tasks)):
            key = keys[i]
            k = groups[key][0]
            if isinstance(res, Exception):
                log.warning("tuning kernel %s (%s) failed, the heuristic stays: %s: %s", key,
                            k.loc, type(res).__name__, res)
            elif res is not None:
                rows[key] = self._row(key, k, len(groups[key]), res)
            self._line(n + 1, len(tasks), t0, final=n + 1 == len(tasks))

    def _row(self, key, kernel, count, res: dict) -> Row:
        tactic = Tactic.from_json(res["tactic"])
        row = Row(key, kernel.loc, count, tactic, "tuned", res["time_s"],
                  res["default_time_s"], res["candidates"], tuple(res["rejected"]))
        if self.cache is not None:
            from .cache import Entry
            self.cache.put(self.target, key, Entry(
                tactic=tactic, time_s=row.time_s, default_time_s=row.default_time_s,
                candidates=row.candidates, rejected=row.rejected, level=self.level))
        return row

    # ---- reporting --------------------------------------------------------------------------
    def _line(self, done: int, total: int, t0: float, final: bool = False) -> None:
        if not self.progress:
            return
        now = time.perf_counter()
        last = getattr(self, "_last_line", 0.0)
        if not final and now - last < 2.0 and done != 1:
            return
        self._last_line = now
        elapsed = now - t0
        eta = elapsed / done * (total - done) if done else 0.0
        print(f"ptxc tune: {'done' if final else 'running'}: kernel {done}/{total}, "
              f"{elapsed:.1f} s, ETA {eta:.0f} s", file=self.stream, flush=True)

    def _summary(self) -> None:
        by = {}
        for r in self.report:
            by[r.source] = by.get(r.source, 0) + 1
        why = ""
        if not self.can_measure and self.level != "off":
            why = (f" (no measurement: {self.target.kind} target "
                   f"{self.target.name or self.target.arch} is not this machine's GPU)")
        log.log(logging.WARNING if why and by.get("heuristic") else logging.INFO,
                "tuning: %d distinct kernels: %d tuned, %d from the timing cache, %d by the "
                "heuristic%s", len(self.report), by.get("tuned", 0), by.get("cache", 0),
                by.get("heuristic", 0), why)


def _pass_text(p) -> str:
    """The schedule pass as pipeline text, its object fields (``target``, ``tactics``: set
    again where the candidate is built) at their defaults."""
    fields = attrs.fields_dict(type(p))
    reset = {}
    for name in ("target", "tactics"):
        if name in fields:
            d = fields[name].default
            reset[name] = d.factory() if isinstance(d, attrs.Factory) else d
    return str(attrs.evolve(p, **reset))


def _default_executor(target, timer):
    """Every GPU of the host where the target is cuda and there are several, else here."""
    from .executors import executor_for
    return executor_for("auto", target.kind, timer)


def _validate(tactic: Tactic, kernel, key: str, schedule_pass) -> None:
    """Apply ``tactic`` to a copy of the isolated kernel through the schedule pass: a
    TuningError where it does not apply (unknown option, refused value, a schedule that
    declines the kernel)."""
    from ..ir.parser import parse_ir
    from ..ir.printer import print_ir
    module = parse_ir(print_ir(kernel.module))
    p = attrs.evolve(schedule_pass, tactics={key: tactic})
    try:
        p.run(module)
    except TuningError:
        raise
    except Exception as e:  # noqa: BLE001  (any failure: the tactic does not apply)
        raise TuningError(f"tactic {tactic} does not apply: {type(e).__name__}: {e}") from None


def _can_measure(target) -> bool:
    """cpu: always (the host is the target); cuda: where the GPU here is the target's (same
    chip generation, SM count and chip, :func:`ptxc.target.chip_name`: an H200 does not time
    kernels for an H100 SXM, whose memory is slower; timings on another GPU would choose for
    the wrong one)."""
    if target.kind == "cpu":
        return True
    from ..target import chip_name, device_target
    here = device_target()
    return here is not None and here.sm == target.sm and here.sms == target.sms and \
        chip_name(here) == chip_name(target)
