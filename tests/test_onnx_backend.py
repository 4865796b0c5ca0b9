"""The ONNX backend test suite on ptxc's interpreter path (device CPU): every in-scope test
passes or is an expected failure with a reason (tests/support/onnx_backend_xfail.txt)."""

import ptxc.backend
from support.onnx_conformance import make_backend_test

backend_test = make_backend_test(ptxc.backend.PtxcInterpreterBackend, __name__)
globals().update(backend_test.enable_report().test_cases)
