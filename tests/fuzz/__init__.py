"""ptxc's own fuzzing suite (issue 13): hypothesis-driven, structure-aware mutations of ONNX
models, plan files and run inputs, each case run in a child process with a timeout so crashes
(a signal) and hangs are counted, as are untyped errors (an exception that is no PtxcError).

    python -m tests.fuzz --minutes 2                 # all three targets, time split evenly
    python -m tests.fuzz --target plan --minutes 10  # one target

A case that crashes, hangs or raises an untyped error is saved under tests/fuzz/crashes/ and
replayed by tests/fuzz/test_regressions.py from then on. See harness.py (the parent), worker.py
(the child) and cases.py (the strategies).
"""
