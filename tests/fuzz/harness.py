"""The fuzz harness: generates cases with hypothesis (cases.py), runs each in the worker child
(worker.py) with a timeout, counts outcomes, and saves every crash, hang and untyped error
under tests/fuzz/crashes/ (replayed by test_regressions.py).

Outcomes: ``ok`` (ran, or refused with a typed PtxcError: both are right answers to hostile
input), ``untyped`` (an exception that is no PtxcError), ``crash`` (the worker died: a signal
or an exit), ``hang`` (no answer within the timeout; the worker is killed). A plan whose object
code (machine code, relocations) differs from the base plan's and that crashes or hangs while
running (after it loaded) is ``code-crash``/``code-hang``: a crafted shared library doing what
its code says, which only signing keeps out (docs/runtime.md); those are counted and printed
but neither saved nor failing."""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import select
import struct
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
CRASHES = os.path.join(HERE, "crashes")
TARGETS = ("model", "plan", "inputs")
#: seconds a new worker may take to import ptxc (not counted against any case)
STARTUP_TIMEOUT = 900


def base_model():
    """Gather (run-time indices) then Relu: the engine the input and plan fuzzers use."""
    from onnx import TensorProto, helper
    nodes = [helper.make_node("Gather", ["d", "i"], ["g"], axis=0, name="g"),
             helper.make_node("Relu", ["g"], ["y"], name="r")]
    g = helper.make_graph(nodes, "base",
                          [helper.make_tensor_value_info("d", TensorProto.FLOAT, [5, 4]),
                           helper.make_tensor_value_info("i", TensorProto.INT64, [3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 4])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


def base_plan() -> bytes:
    import ptxc
    from ptxc.plan.save import plan_to_bytes
    return plan_to_bytes(ptxc.compile(base_model(), target="cpu"))


class Worker:
    """One worker child; restarted after a crash or hang."""

    def __init__(self, timeout: float):
        self.timeout = timeout
        self.proc = None
        self._buf = b""

    def start(self):
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([ROOT, os.path.join(ROOT, "tests")])}
        self.proc = subprocess.Popen([sys.executable, "-m", "tests.fuzz.worker"], cwd=ROOT,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, env=env)
        # the start (importing ptxc) is not part of any case's time: wait for "ready"
        self._buf = b""
        line = self._readline(time.monotonic() + STARTUP_TIMEOUT)
        if not line:
            self.stop()
            raise RuntimeError(f"the fuzz worker did not start in {STARTUP_TIMEOUT} s")

    def stop(self):
        if self.proc is not None:
            try:
                self.proc.kill()
                self.proc.wait(10)
            except Exception:  # noqa: BLE001
                pass
            self.proc = None

    def run(self, target: str, payload: bytes) -> dict:
        if self.proc is None or self.proc.poll() is not None:
            self.start()
        msg = json.dumps({"target": target, "hex": payload.hex()}).encode()
        try:
            self.proc.stdin.write(struct.pack("<I", len(msg)) + msg)
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            return self._dead()
        deadline = time.monotonic() + self.timeout
        stage = "load"
        while True:
            line = self._readline(deadline)
            if line is None:
                self.stop()
                return {"outcome": "hang", "error": f"no answer in {self.timeout:g} s",
                        "stage": stage}
            if not line:
                return self._dead(stage)
            ans = json.loads(line)
            if "outcome" in ans:
                return {**ans, "stage": stage}
            stage = ans.get("stage", stage)

    def _readline(self, deadline: float):
        """The worker's next line (b"" when it died, None at the deadline). Read from the raw
        pipe with a buffer of our own: a buffered readline could take two lines at once, and
        select() would then wait for the second one, already read, until the timeout."""
        fd = self.proc.stdout.fileno()
        while b"\n" not in self._buf:
            ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                return None
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                return b""
            self._buf += chunk
        line, _, self._buf = self._buf.partition(b"\n")
        return line

    def _dead(self, stage: str = "load") -> dict:
        rc = self.proc.wait(10)
        self.proc = None
        return {"outcome": "crash", "error": f"worker died: return code {rc}", "stage": stage}


def save(target: str, payload: bytes, result: dict) -> str:
    os.makedirs(CRASHES, exist_ok=True)
    name = f"{target}-{hashlib.sha1(payload).hexdigest()[:16]}"
    with open(os.path.join(CRASHES, name + ".bin"), "wb") as f:
        f.write(payload)
    with open(os.path.join(CRASHES, name + ".json"), "w") as f:
        json.dump({"target": target, **result}, f)
    return name


def code_edited(base: bytes, payload: bytes) -> bool:
    """Whether ``payload`` (a plan mutated from ``base``) holds code other than the base's: its
    object code blob (machine code and relocations) differs. Such a plan is a crafted shared
    library; a crash while running it is the trust model's documented limit (only a signature
    keeps it out), counted apart from crashes of the loader or of honest code."""
    from .cases import object_blob
    try:
        at, n = object_blob(payload)
    except Exception:  # noqa: BLE001  (a header too damaged to find the blob: no code ran)
        return False
    b_at, b_n = object_blob(base)
    return payload[at:at + n] != base[b_at:b_at + b_n]


def fuzz(target: str, seconds: float, timeout: float, worker: Worker, counts: dict,
         log=print) -> None:
    from hypothesis import HealthCheck, Phase, given, settings
    from . import cases
    base = base_plan() if target == "plan" else None
    strategy = {"model": cases.models(), "inputs": cases.run_inputs(),
                "plan": cases.plans(base) if target == "plan" else None}[target]
    deadline = time.monotonic() + seconds

    @settings(max_examples=25, deadline=None, database=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(strategy)
    def batch(payload):
        if time.monotonic() > deadline:
            return
        r = worker.run(target, payload)
        if target == "plan" and r["outcome"] in ("crash", "hang") and r["stage"] == "run" \
                and code_edited(base, payload):
            r["outcome"] = "code-" + r["outcome"]
            log(f"  plan: {r['outcome']}: running a plan whose machine code was edited (a "
                "recomputed checksum; trusted code, see docs/runtime.md)")
        counts[r["outcome"]] = counts.get(r["outcome"], 0) + 1
        if r["outcome"] in ("crash", "hang", "untyped"):
            log(f"  {target}: {r['outcome']}: {r['error']} -> {save(target, payload, r)}")

    while time.monotonic() < deadline:
        batch()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.fuzz")
    ap.add_argument("--minutes", type=float, default=2.0, help="total time (split over targets)")
    ap.add_argument("--target", choices=TARGETS + ("all",), default="all")
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds per case")
    a = ap.parse_args(argv)
    targets = TARGETS if a.target == "all" else (a.target,)
    worker = Worker(a.timeout)
    bad = 0
    try:
        for t in targets:
            counts: dict = {}
            t0 = time.monotonic()
            fuzz(t, a.minutes * 60 / len(targets), a.timeout, worker, counts)
            n = sum(counts.values())
            print(f"fuzz {t}: {n} cases in {time.monotonic() - t0:.0f} s: "
                  f"{counts.get('ok', 0)} ok, {counts.get('typed', 0)} typed errors, "
                  f"{counts.get('crash', 0)} crashes, {counts.get('hang', 0)} hangs, "
                  f"{counts.get('untyped', 0)} untyped errors"
                  + (f"; {counts.get('code-crash', 0)} crashes and {counts.get('code-hang', 0)} "
                     "hangs running edited machine code (trusted code)" if t == "plan" else ""),
                  flush=True)
            bad += counts.get("crash", 0) + counts.get("hang", 0) + counts.get("untyped", 0)
    finally:
        worker.stop()
    return 1 if bad else 0
