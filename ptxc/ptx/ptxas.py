"""ptxas: NVIDIA's PTX assembler, used to check PTX and to read each kernel's resources
(registers, spills, shared memory, stack) without a GPU.

``assemble(ptx, arch)`` runs ``ptxas -arch=ARCH -v`` on the text and parses its report; PTX that
does not assemble is a CompileError carrying ptxas's message. The driver's JIT (on the GPU
machine) assembles the same text the same way, so what passes here loads there.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile

import attrs

from ..errors import CompileError
from .target import check_arch


def ptxas_path() -> str | None:
    """``$PTXC_PTXAS``, else ``ptxas`` on ``PATH``, else ``$CUDA_HOME``/``$CUDA_PATH``/
    ``/usr/local/cuda*`` ``bin/ptxas``; None when there is none."""
    env = os.environ.get("PTXC_PTXAS")
    if env and os.access(env, os.X_OK):
        return env
    found = shutil.which("ptxas")
    if found:
        return found
    roots = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH")]
    import glob
    roots += sorted(glob.glob("/usr/local/cuda*"), reverse=True)
    for r in roots:
        if r and os.access(os.path.join(r, "bin", "ptxas"), os.X_OK):
            return os.path.join(r, "bin", "ptxas")
    return None


@attrs.frozen
class KernelResources:
    """What ptxas reports for one kernel (bytes unless said)."""

    name: str
    registers: int = 0
    shared_bytes: int = 0
    stack_bytes: int = 0
    spill_stores: int = 0
    spill_loads: int = 0
    barriers: int = 0


@attrs.frozen
class PtxasReport:
    """ptxas's verdict on a PTX module: per-kernel resources, and its whole ``-v`` log."""

    arch: str
    kernels: dict  # name -> KernelResources
    log: str
    cubin_bytes: int = 0

    @property
    def spills(self) -> int:
        return sum(k.spill_stores + k.spill_loads for k in self.kernels.values())


_ENTRY = re.compile(r"Compiling entry function '([^']+)'")
_PROPS = re.compile(r"Function properties for (\S+)")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers")
_SMEM = re.compile(r"(\d+) bytes smem")
_BARS = re.compile(r"used (\d+) barriers")


def parse_report(log: str, arch: str) -> PtxasReport:
    """Per-kernel resources from ``ptxas -v`` output (entry functions only)."""
    kernels: dict = {}
    current = None
    for line in log.splitlines():
        if m := _ENTRY.search(line):
            current = m.group(1)
            kernels[current] = {"name": current}
        elif m := _PROPS.search(line):
            current = m.group(1) if m.group(1) in kernels else None
        elif current is not None and (m := _FRAME.search(line)):
            k = kernels[current]
            k["stack_bytes"], k["spill_stores"], k["spill_loads"] = map(int, m.groups())
        elif current is not None and (m := _USED.search(line)):
            k = kernels[current]
            k["registers"] = int(m.group(1))
            if s := _SMEM.search(line):
                k["shared_bytes"] = int(s.group(1))
            if s := _BARS.search(line):
                k["barriers"] = int(s.group(1))
    return PtxasReport(arch, {n: KernelResources(**k) for n, k in kernels.items()}, log)


def assemble(ptx: str, arch: str, timeout: float = 600.0) -> PtxasReport:
    """Assemble ``ptx`` for ``arch`` with ``ptxas -v``; its report, or a CompileError with
    ptxas's message. Raises CompileError when there is no ptxas (callers that can do without
    check :func:`ptxas_path` first)."""
    exe = ptxas_path()
    if exe is None:
        raise CompileError("ptx: ptxas not found (PATH, $PTXC_PTXAS, $CUDA_HOME/bin, "
                           "/usr/local/cuda*/bin)")
    check_arch(arch)
    with tempfile.TemporaryDirectory(prefix="ptxc-ptxas-") as d:
        src, out = os.path.join(d, "kernels.ptx"), os.path.join(d, "kernels.cubin")
        with open(src, "w") as f:
            f.write(ptx)
        try:
            r = subprocess.run([exe, f"-arch={arch}", "-v", src, "-o", out],
                               capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise CompileError(f"ptx: ptxas did not finish within {timeout:.0f} s") from None
        log = (r.stdout or "") + (r.stderr or "")
        if r.returncode != 0:
            errors = [ln for ln in log.splitlines() if "error" in ln.lower()] or log.splitlines()
            raise CompileError(f"ptx: ptxas -arch={arch} rejected the PTX (exit "
                               f"{r.returncode}):\n" + "\n".join(errors[:20]))
        size = os.path.getsize(out) if os.path.exists(out) else 0
    rep = parse_report(log, arch)
    return attrs.evolve(rep, cubin_bytes=size)
