"""Host machine code: the cpu target's LLVM IR, optimized for this CPU and compiled to an object.

    obj, module = compile_object(llvm_program)   # relocatable ELF bytes, the optimized module
    host_cpu_features()                          # what that object may use ("+avx2,+fma,...")

The emitted module is parsed, optimized with LLVM's new pass manager at O3 with loop and SLP
vectorization for the host CPU (its name and features) and compiled to a relocatable object file.
The runtime (:class:`ptxc.driver.cpu.CpuProgram`) loads that object into MCJIT without running
the optimizer or the code generator again, and a plan stores it.

The C library functions a kernel may call (:data:`LIBM`: ``tanh``, ``erf``, and the
``expf``/``powf``/... that LLVM's intrinsics become; :data:`LIBGCC`: half-precision conversions)
are listed here, as what code generation may leave undefined: the runtime registers exactly
these, and a plan's checks allow exactly these.
"""

from __future__ import annotations

from ..errors import CompileError
from ..lower.llvm_scalar import _TRIG
from ..lower.loop_to_llvm import new_host_target_machine

__all__ = ["LIBM", "LIBGCC", "optimize", "compile_object", "host_cpu_features"]

#: C library functions kernels may call, directly or through LLVM intrinsics (with the
#: trigonometric and hyperbolic functions math.* ops call, llvm_scalar._TRIG, double and float)
LIBM = ["tanh", "erf", "exp", "expf", "log", "logf", "pow", "powf", "sqrt", "sqrtf", "floor",
        "floorf", "ceil", "ceilf", "fabs", "fabsf", "fmax", "fmaxf", "fmin", "fminf", "exp2",
        "exp2f", "tanhf", "erff", "roundeven", "roundevenf", "fma", "fmaf"] \
    + [f for n in _TRIG for f in (n, n + "f")]
#: libgcc's half-precision conversions
LIBGCC = ["__truncdfhf2", "__truncsfhf2", "__extendhfsf2", "__extendhfdf2"]


def optimize(text: str, opt_level: int = 3, tm=None):
    """Parse and optimize LLVM IR text for the host; returns the llvmlite module."""
    import llvmlite.binding as llvm
    tm = tm or new_host_target_machine()
    try:
        mod = llvm.parse_assembly(text)
        mod.verify()
    except RuntimeError as e:
        raise CompileError(f"cpu: invalid LLVM IR: {e}") from None
    pto = llvm.create_pipeline_tuning_options(speed_level=opt_level)
    pto.loop_vectorization = opt_level >= 2
    pto.slp_vectorization = opt_level >= 2
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(mod, pb)
    return mod


def compile_object(program, opt_level: int = 3) -> tuple[bytes, object]:
    """``(object code, optimized llvmlite module)`` of an :class:`~ptxc.lower.kernel_table.
    LLVMProgram` (``program.text``) for this host: the machine code of every kernel."""
    tm = new_host_target_machine()
    module = optimize(program.text, opt_level, tm)
    return bytes(tm.emit_object(module)), module


def host_cpu_features() -> str:
    """The host CPU's LLVM feature string, sorted (what an object file's code may use)."""
    import llvmlite.binding as llvm
    return ",".join(sorted(llvm.get_host_cpu_features().flatten().split(",")))
