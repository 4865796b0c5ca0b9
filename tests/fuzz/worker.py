"""The fuzz worker: a child process that runs cases sent by the harness, one at a time, and
answers each with its outcome. A case may first report a stage it reached (``{"stage":
"run"}``: a plan loaded and is about to run), so that a crash is counted where it happened. A crash (signal) or hang kills only this process; the harness
counts it and starts a new worker.

Protocol: a case is ``<4-byte length><JSON {"target", "hex"}>`` on stdin; the answer is one
JSON line on stdout: ``{"outcome": "ok" | "typed" | "untyped", "error": "..."}``."""

from __future__ import annotations

import json
import struct
import sys

import numpy as np


def _inputs_for(engine, rng):
    out = {}
    for n, t in engine.inputs.items():
        dt = t.element.np_dtype
        out[n] = (rng.integers(0, 3, t.shape) if dt.kind in "iu" else
                  rng.standard_normal(t.shape)).astype(dt)
    return out


def _small(engine) -> bool:
    return all(t.size <= 1 << 20 for t in list(engine.inputs.values())
               + list(engine.outputs.values()))


def stage(name: str) -> None:
    """Tell the harness the case reached ``name`` (a crash after it is counted there)."""
    sys.stdout.write(json.dumps({"stage": name}) + "\n")
    sys.stdout.flush()


def run_case(target: str, payload: bytes, state: dict) -> None:
    import onnx
    import ptxc
    rng = np.random.default_rng(0)
    if target == "model":
        m = onnx.ModelProto()
        m.ParseFromString(payload)
        module = ptxc.import_onnx(m)
        if sum(1 for _ in module.walk()) > 200:
            return
        engine = ptxc.compile(module, target="cpu")
        if _small(engine):
            feeds = _inputs_for(engine, rng)
            engine.run(feeds)
    elif target == "plan":
        from ptxc.driver.load import engine_from_plan
        engine = engine_from_plan(payload)
        stage("run")  # loaded: a crash from here on is in the plan's code, not the loader
        if _small(engine):
            engine.run(_inputs_for(engine, rng))
    elif target == "inputs":
        engine = state.get("engine")
        if engine is None:
            from tests.fuzz.harness import base_model
            engine = state["engine"] = ptxc.compile(base_model(), target="cpu")
        engine.run(build_inputs(json.loads(payload)))
    elif target == "selftest":  # the harness's own test: a crash, a hang, an untyped error
        import os
        import time
        what = payload.decode()
        if what == "crash":
            os.abort()
        if what == "hang":
            time.sleep(3600)
        if what == "untyped":
            raise KeyError("untyped on purpose")
    else:
        raise ValueError(target)


def build_inputs(desc: dict) -> dict:
    rng = np.random.default_rng(1)
    out = {}
    for name, d in desc.items():
        shape = tuple(d["shape"])
        n = int(np.prod(shape)) if shape else 1
        fill = d["fill"]
        if fill == "range":
            a = np.arange(n) - n // 2
        elif fill == "nan":
            a = np.full(n, np.nan)
        elif fill == "huge":
            a = np.full(n, 2**62, dtype=np.int64) if d["dtype"] in ("int64",) else np.full(n, 1e300)
        elif fill == "neg":
            a = -np.arange(1, n + 1) * 3
        elif fill == "random":
            a = rng.integers(-8, 8, n)
        else:
            a = np.zeros(n)
        with np.errstate(all="ignore"):
            try:
                a = a.astype(d["dtype"]).reshape(shape)
            except (ValueError, TypeError, OverflowError):
                a = np.zeros(shape, np.float32)
        kind = d["kind"]
        out[name] = (a.tolist() if kind == "list" else a.reshape(-1)[0] if kind == "scalar"
                     and a.size else None if kind == "none" else np.asfortranarray(a)
                     if kind == "fortran" else a)
    return out


def main() -> None:
    import ptxc
    state: dict = {}
    stdin, stdout = sys.stdin.buffer, sys.stdout
    stdout.write(json.dumps({"ready": True}) + "\n")  # imports done: cases are timed from here
    stdout.flush()
    while True:
        head = stdin.read(4)
        if len(head) < 4:
            return
        (n,) = struct.unpack("<I", head)
        msg = json.loads(stdin.read(n))
        try:
            run_case(msg["target"], bytes.fromhex(msg["hex"]), state)
            ans = {"outcome": "ok", "error": ""}
        except ptxc.PtxcError as e:
            ans = {"outcome": "typed", "error": f"{type(e).__name__}: {str(e)[:200]}"}
        except BaseException as e:  # noqa: BLE001  (the point: anything untyped is counted)
            ans = {"outcome": "untyped", "error": f"{type(e).__name__}: {str(e)[:300]}"}
        stdout.write(json.dumps(ans) + "\n")
        stdout.flush()


if __name__ == "__main__":
    main()
