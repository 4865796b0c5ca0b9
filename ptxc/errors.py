"""The typed errors of ptxc.

Every error a user can meet derives from :class:`PtxcError`; a user never sees a bare KeyError,
AssertionError or protobuf traceback. Each message says what is wrong and where (op, ONNX node
name, file), so that it can be acted on without a debugger.
"""

from __future__ import annotations


class PtxcError(Exception):
    """Base of every error ptxc raises on purpose."""


class ModelError(PtxcError, ValueError):
    """The model is malformed or invalid: unreadable file, failed ONNX check, bad attribute."""


class ShapeInputError(ModelError):
    """A value that decides a shape (Reshape's shape, Slice's starts, ...) is not known at compile time.

    ptxc's shapes are static. ``inputs`` names the graph inputs whose values would make the shape
    known; pass them with ``constant_inputs=`` to bind them at compile time (as TensorRT binds shape
    tensors through an optimization profile).
    """

    def __init__(self, message: str, inputs: tuple[str, ...] = ()):
        super().__init__(message)
        self.inputs = tuple(inputs)


class UnsupportedOpError(ModelError):
    """The model uses ops ptxc does not support; ``ops`` maps op type to the node names using it."""

    def __init__(self, ops: dict[str, list[str]], source: str = "model"):
        self.ops = {k: list(v) for k, v in sorted(ops.items())}
        lines = []
        for op_type, nodes in self.ops.items():
            shown = ", ".join(repr(n) for n in nodes[:8])
            more = f", ... ({len(nodes) - 8} more)" if len(nodes) > 8 else ""
            lines.append(f"  {op_type} x{len(nodes)}: {shown}{more}")
        super().__init__(
            f"{source}: {len(self.ops)} unsupported op type(s):\n" + "\n".join(lines)
        )


class ParseError(ModelError):
    """The IR text does not parse; the message gives line and column."""


class BindingError(PtxcError, ValueError):
    """The inputs given at run time do not match the bindings: unknown or missing name, wrong shape
    or dtype."""


class CompileError(PtxcError):
    """Compilation failed: a pass, a lowering or code generation could not do its work."""


class VerifyError(CompileError):
    """The IR broke an invariant (types, dominance, per-op rules); the message names the op."""


class NumericsError(CompileError):
    """check-numerics found a pass whose output differs from its input beyond tolerance."""


class PlanError(PtxcError):
    """A plan file is damaged, foreign, or does not match this ptxc, LLVM or GPU."""


class DeviceError(PtxcError):
    """A CUDA call failed."""


class OutOfMemoryError(DeviceError):
    """The device ran out of memory (the message gives the requested and free bytes), or an
    engine's ``max_memory`` leaves no room for another execution context."""


class CalibrationError(PtxcError):
    """INT8 calibration failed: bad calibration data (missing input, wrong shape or dtype, no
    batches), an unknown calibrator or setting."""


class CalibrationCacheError(CalibrationError):
    """A calibration cache file cannot be used: unreadable, of another format, or written for
    another model (or, with no data to recalibrate, for other calibrator settings)."""


class RunError(PtxcError):
    """An inference failed at run time on well-formed bindings, because of the values in them
    (the runtime reads the kernels' error flag after every run)."""


class IndexOutOfRangeError(RunError, IndexError):
    """An index read from a tensor at run time (Gather's indices, ...) is outside the axis it
    indexes; the message names the op (ONNX node) and the valid range. Negative indices count
    from the end, as ONNX says: ``[-n, n)`` is valid on an axis of ``n``."""


class PrecisionError(CompileError):
    """A reduced precision cannot hold the model: a weight outside the low type's range (the
    message names the op, its ONNX node, and the override that keeps it in fp32)."""


class TuningError(PtxcError):
    """Auto-tuning failed or was given something it cannot use: a tactic that does not parse or
    names an option its schedule pass lacks, a tactic that does not apply to its kernel, a
    candidate whose output differs from the default's (the message names the tactic and the
    kernel)."""


class TimingCacheError(TuningError):
    """A timing cache file cannot be used: unreadable, not JSON, of another format version, or
    with a malformed entry (the message names the file and the entry)."""
