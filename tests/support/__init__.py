"""Shared test helpers: model builders (light_models, small_nets, qdq_models, tool_models,
attention_models, new_ops, one_node), IR builders (loop_ir, ir_text, contraction_ir, int8_ir),
shared test bodies (concurrency, onnx_conformance and its xfail lists, bench_scripts).

Anything a test imports that is not itself a test lives here, so tests/ holds only test_*.py
and conftest.py at its top level (tests/test_architecture.py checks it). tests/conftest.py puts
tests/ on ``sys.path``: tests import ``from support.light_models import ...`` or
``from support import light_models``; modules here import each other relatively.
"""
