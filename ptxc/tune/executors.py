"""Where the kernels are measured: here, on every GPU of this host, or on a Ray cluster.

    for index, result in executor.run(tasks):     # each task: one kernel to tune
        ...

A task is plain data (:func:`task`): the isolated kernel's IR text, its key, the schedule
pass's pipeline text, the target, the candidates and the runs, and a deadline (the tuning
budget's end, wall-clock). :func:`run_task` measures it with
:func:`ptxc.tune.tuner.tune_kernel` on the device of the process it runs in, or returns None
when the deadline has passed before it started (that kernel then takes the heuristic).

* :class:`Here`: in this process, one task after another (candidates built in a process pool);
* :class:`EveryGpu`: one worker process per GPU of the host (``CUDA_VISIBLE_DEVICES`` set to
  its GPU before CUDA is touched), the tasks handed out as workers free up; used where the
  host has more than one GPU of the target's kind;
* :class:`Ray`: each task a Ray task (``num_gpus=1`` on cuda, ``num_cpus=1`` on cpu) on the
  cluster at ``address`` (``"local"``: a local instance, as CI runs it). Ray is an optional
  dependency (``pip install ptxc[ray]``); without it, a TuningError says so. Nothing
  home-made for distribution: the results come back to the caller, who merges them into one
  timing cache.

Each yields ``(index, result)`` in completion order; a task that raised yields the exception
(the tuner reports it and keeps the heuristic for that kernel).
"""

from __future__ import annotations

import os
import time

from ..errors import TuningError


def task(kernel_text: str, key: str, pass_text: str, target: dict, candidates: list,
         runs: int, jobs: int, deadline: float | None) -> dict:
    return {"kernel_text": kernel_text, "key": key, "pass_text": pass_text, "target": target,
            "candidates": candidates, "runs": runs, "jobs": jobs, "deadline": deadline}


def run_task(t: dict, timer=None, pool=None) -> dict | None:
    """Measure one task here (module docstring); None when its deadline has passed.
    ``pool``: a process pool to build its candidates in (None: here)."""
    if t["deadline"] is not None and time.time() > t["deadline"]:
        return None
    from .tuner import tune_kernel
    return tune_kernel(t["kernel_text"], t["key"], t["pass_text"], t["target"],
                       t["candidates"], t["runs"], pool, timer)


class Here:
    """Measure in this process (the default; the only one that takes a fake ``timer``)."""

    name = "here"

    def __init__(self, timer=None):
        self.timer = timer

    def run(self, tasks: list):
        from .tuner import build_pool
        pool = build_pool(tasks[0]["jobs"]) if tasks else None
        try:
            for i, t in enumerate(tasks):
                try:
                    yield i, run_task(t, self.timer, pool)
                except Exception as e:  # noqa: BLE001  (one kernel's failure is that kernel's)
                    yield i, e
        finally:
            if pool is not None:
                pool.shutdown()


def _pin_worker(devices) -> None:
    """Pool initializer: take one GPU from the queue before anything touches CUDA."""
    os.environ["CUDA_VISIBLE_DEVICES"] = str(devices.get())


def _run_pinned(t: dict):
    """A task in a pinned worker; its result names the GPU that measured it (``device``)."""
    try:
        res = run_task(t)
    except Exception as e:  # noqa: BLE001
        return e
    return res if res is None else dict(res, device=os.environ.get("CUDA_VISIBLE_DEVICES"))


class EveryGpu:
    """One worker process per GPU of this host (module docstring)."""

    name = "every-gpu"

    def __init__(self, devices: list[int]):
        if not devices:
            raise TuningError("EveryGpu needs at least one GPU")
        self.devices = list(devices)

    def run(self, tasks: list):
        import multiprocessing
        ctx = multiprocessing.get_context("spawn")   # no CUDA state inherited
        from ..ptx.jobs import _main_hidden
        queue = ctx.Queue()
        for d in self.devices:
            queue.put(d)
        with _main_hidden():    # spawned workers must not re-run the main script
            pool = ctx.Pool(len(self.devices), initializer=_pin_worker, initargs=(queue,))
        with pool:
            pending = {i: pool.apply_async(_run_pinned, (t,)) for i, t in enumerate(tasks)}
            while pending:
                for i in [i for i, r in pending.items() if r.ready()]:
                    yield i, pending.pop(i).get()
                time.sleep(0.01)


class Ray:
    """Each task a Ray task on the cluster at ``address`` (module docstring)."""

    name = "ray"

    def __init__(self, address: str = "local", kind: str = "cpu"):
        try:
            import ray
        except ImportError:
            raise TuningError("tuning with Ray needs the ray package: pip install 'ptxc[ray]'") \
                from None
        self.ray = ray
        self.address = address
        self.kind = kind

    def run(self, tasks: list):
        ray = self.ray
        started = not ray.is_initialized()
        if started:
            if self.address == "local":
                ray.init(include_dashboard=False, log_to_driver=False)
            else:
                ray.init(address=self.address, log_to_driver=False)
        try:
            res = {"num_gpus": 1} if self.kind == "cuda" else {"num_cpus": 1}
            remote = ray.remote(**res)(_ray_task)
            refs = {remote.remote(t): i for i, t in enumerate(tasks)}
            waiting = list(refs)
            while waiting:
                done, waiting = ray.wait(waiting, num_returns=1)
                for ref in done:
                    try:
                        yield refs[ref], ray.get(ref)
                    except Exception as e:  # noqa: BLE001
                        yield refs[ref], e
        finally:
            if started:
                ray.shutdown()


def _ray_task(t: dict):
    return run_task(t)


#: ``tuning_workers=``: where kernels are measured
WORKERS = ("auto", "here", "every-gpu", "ray")


def check_workers(value: str) -> str:
    """``auto`` (every GPU of the host where it has several, else here), ``here``,
    ``every-gpu``, ``ray`` (a local Ray instance) or ``ray:ADDRESS`` (a cluster)."""
    if not isinstance(value, str) or value.split(":", 1)[0] not in WORKERS or \
            (":" in value and not value.startswith("ray:")):
        raise TuningError(f"tuning_workers={value!r}: one of auto, here, every-gpu, ray or "
                          "ray:ADDRESS")
    return value


def executor_for(workers: str, kind: str, timer=None):
    """The executor ``tuning_workers`` names, for a target of ``kind``."""
    check_workers(workers)
    if workers.startswith("ray"):
        return Ray(workers[4:] or "local", kind)
    if workers == "every-gpu" or (workers == "auto" and kind == "cuda" and timer is None
                                  and len(local_gpus()) > 1):
        return EveryGpu(local_gpus())
    return Here(timer)


def local_gpus() -> list[int]:
    """The GPU ordinals of this host (numba's view; empty without a GPU)."""
    try:
        from numba import cuda
        if not cuda.is_available():
            return []
        return [d.id for d in cuda.list_devices()]
    except Exception:  # noqa: BLE001  (no driver: no GPU)
        return []
