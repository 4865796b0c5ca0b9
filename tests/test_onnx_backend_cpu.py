"""The ONNX backend test suite on ptxc's compiled CPU path (graph-opt, the lowerings, the LLVM JIT):
the same bar as the interpreter backend — every in-scope test passes or is an expected failure
with a reason (tests/support/onnx_backend_xfail.txt, plus tests/support/onnx_backend_xfail_cpu.txt
for what only the compiled path cannot do)."""

import pytest

import ptxc.backend
from support.onnx_conformance import make_backend_test

pytestmark = pytest.mark.slow

backend_test = make_backend_test(ptxc.backend.PtxcBackend, __name__,
                                 extra_xfail_file="onnx_backend_xfail_cpu.txt")
globals().update(backend_test.test_cases)
