"""The ONNX backend test suite on ptxc's cuda target (device "CUDA": graph-opt, the lowerings,
map-to-gpu, NVPTX code generation, PTX run on the GPU): the bar of the compiled CPU path
(tests/test_onnx_backend_cpu.py) — every in-scope test passes or is an expected failure with a
reason, from the common list (tests/support/onnx_backend_xfail.txt) or the cuda target's own
(tests/support/onnx_backend_xfail_cuda.txt). An expected failure that passes fails the suite
until its entry is removed. Skipped without a GPU (marker ``gpu``, see tests/conftest.py)."""

import pytest

import ptxc.backend
from support.onnx_conformance import make_backend_test

pytestmark = pytest.mark.gpu

backend_test = make_backend_test(ptxc.backend.PtxcBackend, __name__, device="cuda",
                                 extra_xfail_file="onnx_backend_xfail_cuda.txt")
globals().update(backend_test.test_cases)
