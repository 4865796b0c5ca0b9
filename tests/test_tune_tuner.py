"""The Tuner over a whole module (ptxc/tune/tuner.py): one measurement per distinct kernel key,
the timing cache filled and then used (nothing measured the second time), a stale cached
tactic skipped with a warning and re-tuned, the budget respected, a target that cannot be
measured here taking the cache or the heuristic and saying so; and the tactics it chooses
reach the schedule pass through the compile spine."""

import logging

import attrs
import pytest

from ptxc.pipeline import run_stages, CompileOptions
from ptxc.target import Target
from ptxc.tune.cache import Entry, TimingCache
from ptxc.tactic.kernels import kernels_of
from ptxc.tactic.tactic import Tactic
from ptxc.tune.tuner import Tuner

from support.tune_schedule import fc_module, test_schedule

FAKE = {"auto": 1.0, "auto{variant=1}": 0.9, "auto{wrong=true}": 0.1, "auto{variant=2}": 0.5}


def _timer(calls):
    def timer(tactic, bench, inputs, runs):
        calls.append(str(tactic))
        return [FAKE[str(tactic)]] * runs
    return timer


def _tuner(cache, calls, **kw):
    from ptxc.tune.executors import Here
    return Tuner(Target.host(), "fast", cache, jobs=1, executor=Here(_timer(calls)),
                 progress=False, **kw)


def test_one_measurement_per_key_then_the_cache():
    m = fc_module(layers=3)
    keys = {k.key for k in kernels_of(m)}
    cache, calls = TimingCache(), []
    t = _tuner(cache, calls)
    tactics = t.choose_tactics(m, test_schedule())
    assert set(tactics) == keys and set(tactics.values()) == {Tactic("auto", {"variant": 2})}
    assert len(calls) == 3 * len(keys)                       # the wrong candidate is not timed
    assert sum(r.kernels for r in t.report) == len(kernels_of(m))
    assert {r.source for r in t.report} == {"tuned"} and len(cache) == len(keys)
    again, calls2 = _tuner(cache, []), []
    assert again.choose_tactics(m, test_schedule()) == tactics
    assert calls2 == [] and {r.source for r in again.report} == {"cache"}


def test_a_stale_cached_tactic_is_skipped_and_retuned(caplog):
    m = fc_module()
    (key,) = {k.key for k in kernels_of(m)}
    cache = TimingCache()
    cache.put(Target.host(), key, Entry(Tactic("auto", {"no_such_option": 1}), 0.1, 1.0, 4))
    calls = []
    with caplog.at_level(logging.WARNING, logger="ptxc.tune"):
        tactics = _tuner(cache, calls).choose_tactics(m, test_schedule())
    assert "is skipped" in caplog.text and "no_such_option" in caplog.text
    assert tactics == {key: Tactic("auto", {"variant": 2})} and calls


def test_the_budget_leaves_the_rest_to_the_heuristic():
    m = fc_module()
    t = _tuner(TimingCache(), [], budget_s=1e-9)
    assert t.choose_tactics(m, test_schedule()) == {}
    assert {r.source for r in t.report} == {"heuristic"}


def test_without_measurement_the_cache_or_the_heuristic_and_the_log_says_so(caplog):
    m = fc_module()
    cache, calls = TimingCache(), []
    _tuner(cache, calls).choose_tactics(m, test_schedule())
    with caplog.at_level(logging.INFO, logger="ptxc.tune"):
        t = _tuner(cache, calls, can_measure=False)
        assert t.choose_tactics(m, test_schedule())
        t2 = _tuner(TimingCache(), calls, can_measure=False)
        assert t2.choose_tactics(m, test_schedule()) == {}
    assert {r.source for r in t.report} == {"cache"}
    assert {r.source for r in t2.report} == {"heuristic"}
    assert "no measurement" in caplog.text and "1 by the heuristic" in caplog.text


def test_the_spine_gives_the_chosen_tactics_to_the_schedule_pass():
    """run_stages(tuner=...) calls the tuner before the schedule pass and the pass receives the
    tactics: with the 'wrong' tactic forced by a fake cache, the output is visibly doubled."""
    from ptxc.ir.interpreter import interpret
    import numpy as np
    loop = fc_module()
    (key,) = {k.key for k in kernels_of(loop)}
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 16)).astype(np.float32)
    base = interpret(loop, {"x": x})["y"]

    class Forced:
        report = []

        def choose_tactics(self, module, schedule_pass):
            self.seen = schedule_pass.name
            return {key: Tactic("auto", {"wrong": True})}

    test_schedule()
    from ptxc.frontend.load import as_module
    from support.tune_schedule import fc_net
    m = as_module(fc_net())
    opts = CompileOptions.make("cpu", stage_passes={"loop": "lower-tensor-to-loop,"
                                                    "test-tune-schedule"})
    forced = Forced()
    run_stages(m, "loop", opts, tuner=forced, progress=None)
    assert forced.seen == "test-tune-schedule"
    got = interpret(m, {"x": x})["y"]
    assert np.allclose(got, 2 * base) and not np.allclose(got, base)


def test_tuning_options_are_checked():
    from ptxc.errors import TuningError
    with pytest.raises(TuningError, match="levels are off, fast, full"):
        CompileOptions.make("cpu", tuning="fastest")
    with pytest.raises(TuningError, match="tuning_workers"):
        CompileOptions.make("cpu", tuning_workers="cluster")
    with pytest.raises(Exception, match="tuning_budget_s"):
        CompileOptions.make("cpu", tuning_budget_s=-1)
    o = CompileOptions.make("cpu", tactics={"0123456789abcdef": "auto{variant=2}"})
    assert o.tactics["0123456789abcdef"] == Tactic("auto", {"variant": "2"})
    assert o.cache_key() != CompileOptions.make("cpu").cache_key()
    assert attrs.evolve(o, tuning="fast").cache_key() == o.cache_key()


def test_a_script_without_a_main_guard_tunes_once(tmp_path):
    """The candidate-build pool's workers must not import the caller's main script: a script
    that tunes at its top level (no ``if __name__ == "__main__"``) would otherwise run again in
    every worker. Real cpu tuning, two build processes, the output printed once."""
    import subprocess
    import sys
    import textwrap
    script = tmp_path / "tune_at_top_level.py"
    script.write_text(textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(__import__("os").path.dirname(__file__))!r})
        import ptxc
        from ptxc.tune.tuner import Tuner
        from ptxc.target import Target
        from support.tune_schedule import fc_module
        import ptxc.lower.cpu_schedule as cs
        t = Tuner(Target.host(), "fast", jobs=2, progress=False)
        m = fc_module()
        t.choose_tactics(m, cs.CpuSchedule(target=Target.host()))
        print("TUNED", len(t.report), [r.source for r in t.report])
    """))
    p = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                       timeout=300, cwd=str(tmp_path))
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.count("TUNED") == 1, p.stdout
    assert "'tuned'" in p.stdout


def test_every_gpu_hands_kernels_to_one_pinned_worker_per_device():
    """The one-worker-per-GPU executor's mechanics, on the cpu target (its workers measure
    whatever the target is): two workers, each pinned (CUDA_VISIBLE_DEVICES) to its own device
    before anything runs, every kernel measured once, the results back in the caller."""
    import ptxc.lower.cpu_schedule as cs
    from ptxc.tune import executors
    from ptxc.frontend.load import as_module
    from support.tool_models import cbr_model
    m = as_module(cbr_model(channels=8, size=16))
    run_stages(m, "loop", CompileOptions.make("cpu", stage_passes={
        "loop": "lower-tensor-to-loop"}), progress=None)
    keys = {k.key for k in kernels_of(m)}
    assert len(keys) > 2
    pinned = []
    ex = executors.EveryGpu([0, 1])
    tasks_seen = []
    real_run = ex.run

    def run(tasks):
        tasks_seen.extend(tasks)
        for i, res in real_run(tasks):
            pinned.append(res.get("device"))
            yield i, res
    ex.run = run
    t = Tuner(Target.host(), "fast", TimingCache(), jobs=1, executor=ex, progress=False)
    t.choose_tactics(m, cs.CpuSchedule(target=Target.host()))
    assert len(tasks_seen) == len(keys) and {r.source for r in t.report} == {"tuned"}
    assert set(pinned) <= {"0", "1"} and len(pinned) == len(keys)


class _LastFirst:
    """An executor that completes its tasks last to first, as EveryGpu and Ray may (they yield
    in completion order); each result names its own kernel: the variant ``variant_of`` gives
    the task's key."""

    def __init__(self, variant_of):
        self.variant_of = variant_of

    def run(self, tasks):
        for i in reversed(range(len(tasks))):
            v = self.variant_of[tasks[i]["key"]]
            yield i, {"tactic": Tactic("auto", {"variant": v}).to_json(), "time_s": v * 1e-3,
                      "default_time_s": 1.0, "candidates": 2, "rejected": []}


def test_results_that_arrive_out_of_order_go_to_their_own_kernels():
    from ptxc.frontend.load import as_module
    from support.tool_models import cbr_model
    m = as_module(cbr_model(channels=8, size=16))
    run_stages(m, "loop", CompileOptions.make("cpu", stage_passes={
        "loop": "lower-tensor-to-loop"}), progress=None)
    keys = sorted({k.key for k in kernels_of(m)})
    assert len(keys) >= 3
    variant_of = {key: i + 1 for i, key in enumerate(keys)}
    cache = TimingCache()
    t = Tuner(Target.host(), "fast", cache, jobs=1, executor=_LastFirst(variant_of),
              progress=False)
    tactics = t.choose_tactics(m, test_schedule())
    assert tactics == {key: Tactic("auto", {"variant": v}) for key, v in variant_of.items()}
    for r in t.report:
        assert r.tactic == Tactic("auto", {"variant": variant_of[r.key]}) and r.source == "tuned"
        assert r.time_s == variant_of[r.key] * 1e-3
        assert r.loc == next(k.loc for k in kernels_of(m) if k.key == r.key)
    for key, v in variant_of.items():
        assert cache.get(Target.host(), key).tactic == Tactic("auto", {"variant": v})


@pytest.mark.parametrize("level", ["fast", "full"])
def test_the_cache_records_the_level_tuned_at(level):
    """An entry says how thoroughly it was measured (the merge rule reads it): a fast tuning's
    entries are ``fast`` and lose a merge to a ``full`` entry of fewer candidates."""
    m = fc_module()
    (key,) = {k.key for k in kernels_of(m)}
    cache = TimingCache()
    _tuner_at(level, cache).choose_tactics(m, test_schedule())
    assert cache.get(Target.host(), key).level == level
    other = TimingCache()
    other.put(Target.host(), key, Entry(Tactic("auto", {"variant": 1}), 0.9, 1.0, 1,
                                        level="full"))
    kept = cache.merge(other).get(Target.host(), key)
    assert kept.tactic == (Tactic("auto", {"variant": 2}) if level == "full"
                           else Tactic("auto", {"variant": 1}))


def _tuner_at(level, cache):
    from ptxc.tune.executors import Here
    return Tuner(Target.host(), level, cache, jobs=1, executor=Here(_timer([])),
                 progress=False)


def test_the_options_tactics_win_over_the_tuners():
    """``tactics=`` given by hand win over what tuning chose for the same kernel (compile's
    docstring): the tuner says 'wrong' (the output doubled) and the hand 'variant=1', or the
    other way round; the interpreter's output says which one the schedule pass got."""
    from ptxc.frontend.load import as_module
    from ptxc.ir.interpreter import interpret
    import numpy as np
    from support.tune_schedule import fc_net
    loop = fc_module()
    (key,) = {k.key for k in kernels_of(loop)}
    x = np.random.default_rng(0).standard_normal((4, 16)).astype(np.float32)
    base = interpret(loop, {"x": x})["y"]

    class Forced:
        report = []

        def __init__(self, tactic):
            self.tactic = tactic

        def choose_tactics(self, module, schedule_pass):
            return {key: self.tactic}

    test_schedule()
    for tuned, hand, factor in (("auto{wrong=true}", "auto{variant=1}", 1),
                                ("auto{variant=1}", "auto{wrong=true}", 2)):
        m = as_module(fc_net())
        opts = CompileOptions.make("cpu", tactics={key: hand}, stage_passes={
            "loop": "lower-tensor-to-loop,test-tune-schedule"})
        run_stages(m, "loop", opts, tuner=Forced(Tactic.parse(tuned)), progress=None)
        np.testing.assert_allclose(interpret(m, {"x": x})["y"], factor * base, rtol=1e-6)


def test_measuring_needs_the_targets_gpu_here(monkeypatch):
    """Timings on another GPU would choose for the wrong one: a cuda target is measured only
    where the GPU here has its chip generation, its SM count and its chip (an H100 PCIe, 114
    SMs, does not measure for an H100 SXM, 132; nor does an H200, 132 SMs but faster memory;
    the H100 as its driver names it does); cpu always."""
    import ptxc.target as target_mod
    from ptxc.tune.tuner import _can_measure
    sxm = Target.preset("h100-sxm")
    import attrs
    driver_h100 = attrs.evolve(Target.preset("h100-sxm"), name="NVIDIA H100 80GB HBM3")
    for here, want in ((Target.preset("h100-sxm"), True), (Target.preset("h100-pcie"), False),
                       (Target.preset("a100"), False), (None, False),
                       (Target.preset("h200"), False), (driver_h100, True)):
        monkeypatch.setattr(target_mod, "device_target", lambda here=here: here)
        assert _can_measure(sxm) is want, here
        assert _can_measure(Target.host()) is True
    # a chip no preset names: its name alone does not tell two SM counts apart
    lab = attrs.evolve(sxm, name="Lab GPU")
    for here, want in ((lab, True), (attrs.evolve(lab, sms=100), False)):
        monkeypatch.setattr(target_mod, "device_target", lambda here=here: here)
        assert _can_measure(lab) is want, here


def test_a_hand_tactic_is_reported_as_the_kernels_tactic(tmp_path):
    """engine.tuning names the tactic the kernel got: a hand tactic over tuning's, as "hand"."""
    import ptxc
    from support.tune_schedule import fc_net
    m = fc_module()
    (key,) = {k.key for k in kernels_of(m)}
    hand = Tactic("cpu", {"unroll": 2})
    e = ptxc.compile(fc_net(), target="cpu", cache=False, tuning="fast", layout="nchw",
                     tactics={key: hand}, tuning_budget_s=60)
    (row,) = [r for r in e.tuning if r["key"] == key]
    assert row["tactic"] == str(hand) and row["source"] == "hand"
    assert [k.tactic for k in e.kernels.kernels if k.tactic] == [str(hand)]
