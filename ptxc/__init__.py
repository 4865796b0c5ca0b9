"""ptxc: an open inference compiler for NVIDIA GPUs (and the host CPU).

The public API (README.md; the design: docs/design.md):

    module = ptxc.import_onnx("model.onnx")            # graph-dialect module
    text = ptxc.explore("model.onnx", stage="graph")   # the IR after a stage, as text
    module = ptxc.parse_ir(text); text = ptxc.print_ir(module)
    outputs = ptxc.interpret(module, {"input": x})     # reference semantics, at any stage
    engine = ptxc.compile("model.onnx", target="cpu") # an Engine; engine.run({"input": x})
    engine = ptxc.compile("model.onnx", target="cuda", arch="sm_90")  # PTX + CUDA runtime
    engine = ptxc.compile(model, options=ptxc.CompileOptions.make(target="cuda", arch="sm_89"))
    engine.save("model.plan"); engine = ptxc.load("model.plan")       # plan files
    net = ptxc.Network(); ...                          # build a graph in Python
    ptxc.SUPPORTED_OPS                                 # ONNX op types the importer accepts
"""

from .errors import (BindingError, CalibrationCacheError, CalibrationError,  # noqa: F401
                     CompileError, DeviceError, IndexOutOfRangeError, ModelError,
                     NumericsError, OutOfMemoryError, ParseError, PlanError, PrecisionError,
                     PtxcError, RunError, ShapeInputError, TimingCacheError, TuningError,
                     UnsupportedOpError, VerifyError)
from .dialects import all_ops as _all_ops
from .ir.spec import install_op_table as _install_op_table
from .lower import lowering_passes as _lowering_passes
from .rewrite import passes as _passes
from .rewrite.canonicalization import install_canonicalization_table as _install_canon
from .rewrite.pass_ import install_pass_table as _install_pass_table
from .rewrite.pipeline import install_pipeline_table as _install_pipeline_table

# the registries' tables: the IR core imports no dialect, ptxc.rewrite no pass module
_install_op_table(_all_ops)
_install_pass_table(_passes.all_passes, _lowering_passes)
_install_canon(_passes.all_canonicalizations)
_install_pipeline_table(_passes.all_pipelines)

from .frontend.onnx_import import import_onnx, supported_ops
from .ir.interpreter import interpret
from .ir.parser import parse_ir
from .ir.printer import print_ir
from .compiler import compile  # noqa: A001  (ptxc.compile, as the design names it)
from .pipeline import CompileOptions
from .explore import explore, STAGES  # noqa: F401
from .frontend.network import Network, Tensor  # noqa: F401
from .driver.load import load_plan as load

__version__ = "0.1.0"

SUPPORTED_OPS: tuple[str, ...] = supported_ops()

__all__ = [
    "compile", "CompileOptions", "import_onnx", "Network", "Tensor", "interpret", "parse_ir", "print_ir", "explore", "STAGES", "SUPPORTED_OPS",
    "PtxcError", "ModelError", "UnsupportedOpError", "ShapeInputError", "ParseError",
    "BindingError", "CompileError", "VerifyError", "NumericsError", "PlanError", "DeviceError",
    "OutOfMemoryError", "CalibrationError", "CalibrationCacheError", "RunError",
    "IndexOutOfRangeError", "PrecisionError", "TuningError", "TimingCacheError", "load",
]
