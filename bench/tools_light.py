"""Every tool command on the nine light models on the cpu (issue 12's done-when: "each command
works on the nine light models"). Runs each command as a user would (``python -m ptxc ...``, a
fresh process, the compile cache on as by default), and prints one line per command: the exit
status, the wall time and the line of the output that says what it found. Never run as a test.

    PYTHONPATH=. python bench/tools_light.py [MODEL ...] [--timeout S] [--out DIR]

Commands per model: ``bench --profile --export-profile --json`` (3 timed runs), ``compare``,
``compare --layerwise``, ``bisect``, and ``compile -o PLAN`` then ``bench PLAN``,
``compare --plan PLAN``. Expected: every exit status 0 (compare and bisect say 1 when ptxc and
the reference differ, which is a finding, not a crash; anything else is a bug).
"""

import os
import subprocess
import sys
import tempfile
import time

MODELS = ["squeezenet", "shufflenet", "bvlc_alexnet", "zfnet512", "inception_v1",
          "inception_v2", "resnet50", "densenet121", "vgg19"]


def commands(model: str, out: str) -> list:
    m = f"light:{model}"
    plan = os.path.join(out, f"{model}.plan")
    return [
        ("bench --profile", ["bench", m, "--target", "cpu", "--iterations", "3", "--warmup", "1",
                             "--profile", "--json", os.path.join(out, f"{model}_bench.json"),
                             "--export-profile", os.path.join(out, f"{model}_trace.json")]),
        ("compare", ["compare", m, "--target", "cpu"]),
        ("compare --layerwise", ["compare", m, "--target", "cpu", "--layerwise"]),
        ("bisect", ["bisect", m]),
        ("compile -o", ["compile", m, "--target", "cpu", "-o", plan]),
        ("bench PLAN", ["bench", plan, "--iterations", "3", "--warmup", "1"]),
        ("compare --plan", ["compare", m, "--plan", plan]),
    ]


def summary(text: str, name: str) -> str:
    keys = {"bench --profile": "latency:", "compare": "compare", "compare --layerwise": "layer",
            "bisect": "no rewrite", "compile -o": "plan written", "bench PLAN": "latency:",
            "compare --plan": "compare"}
    lines = [ln for ln in text.splitlines() if ln.strip()]
    hit = [ln for ln in lines if keys.get(name, "") in ln]
    return (hit[-1] if hit else lines[-1] if lines else "")[:150]


def main(argv):
    timeout = 1800
    out = None
    models = []
    it = iter(argv)
    for a in it:
        if a == "--timeout":
            timeout = int(next(it))
        elif a == "--out":
            out = next(it)
        else:
            models.append(a)
    out = out or tempfile.mkdtemp(prefix="ptxc-tools-light-")
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    bad = 0
    for model in models or MODELS:
        for name, args in commands(model, out):
            t = time.perf_counter()
            try:
                r = subprocess.run([sys.executable, "-m", "ptxc", "-q"] + args, env=env,
                                   capture_output=True, text=True, timeout=timeout)
                rc, text = r.returncode, r.stdout + r.stderr
            except subprocess.TimeoutExpired:
                rc, text = "timeout", ""
            dt = time.perf_counter() - t
            bad += rc != 0
            print(f"{model:<13} {name:<20} exit {rc!s:<7} {dt:7.1f} s  {summary(text, name)}",
                  flush=True)
            if rc not in (0, 1):
                print("    " + "\n    ".join(text.strip().splitlines()[-6:]), flush=True)
    print(f"{bad} commands did not exit 0")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
