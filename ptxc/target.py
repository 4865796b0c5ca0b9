"""The compile target: what a schedule may assume about the machine it writes code for.

A :class:`Target` is frozen data: the kind (``cuda`` or ``cpu``), the arch, the SM count, the
shared-memory, register and thread limits, the L2 size and the instruction features. Schedules
read it instead of literals, so one compiler serves an H200, an H100 PCIe (114 SMs), an A100
(sm_80) or an L4 (sm_89) without a GPU present::

    t = Target.resolve()              # PTXC_CUDA_ARCH, else the GPU here, else the sm_90 preset
    t = Target.resolve("sm_89")       # the sm_89 preset (an L4), unless the GPU here is an sm_89
    t = Target.preset("h100-pcie")    # a named GPU
    t.sms, t.shared_per_block, t.has("wgmma")

:meth:`Target.resolve` is the one place in ptxc that reads ``PTXC_CUDA_ARCH`` or asks the device.

The presets' numbers are NVIDIA's published limits (CUDA C Programming Guide, "Compute
Capabilities"; the products' data sheets). Where one arch covers GPUs of different sizes, the
arch's preset is the first GPU listed under it in :data:`ARCH_PRESETS`; :meth:`resolve` on a
machine with a GPU describes that GPU itself (its SM count and limits from the driver).
"""

from __future__ import annotations

import functools
import os
import re

import attrs

from .errors import CompileError

#: instruction features a schedule may ask for (:meth:`Target.has`)
FEATURES = (
    "mma_f16",     # mma.sync m16n8k16 f16 -> f32 (sm_80+ here: ldmatrix and cp.async with it)
    "mma_bf16",    # mma.sync m16n8k16 bf16 -> f32
    "mma_tf32",    # mma.sync m16n8k8 tf32 -> f32
    "mma_s8",      # mma.sync m16n8k32 s8 -> s32
    "cp_async",    # cp.async global -> shared (sm_80+)
    "wgmma",       # warpgroup MMA, wgmma.mma_async (sm_90a)
    "tma",         # cp.async.bulk.tensor with mbarriers (sm_90)
    "pdl",         # programmatic dependent launch, griddepcontrol (sm_90)
    "bf16",        # bf16 arithmetic (sm_80+)
    "fp8",         # e4m3/e5m2 mma (sm_89+)
)

_AMPERE = ("mma_f16", "mma_bf16", "mma_tf32", "mma_s8", "cp_async", "bf16")
_ADA = _AMPERE + ("fp8",)
_HOPPER = _ADA + ("wgmma", "tma", "pdl")
_AFTER_HOPPER = _ADA + ("tma", "pdl")     # wgmma is sm_90a's alone

KiB = 1024
MiB = 1024 * 1024

_ARCH = re.compile(r"^sm_(\d+)([af]?)$")


def arch_number(arch: str) -> tuple[int, str]:
    """``"sm_90a"`` -> ``(90, "a")``; a name that is no ``sm_NN[a|f]`` is a CompileError (the
    one parse of an arch name: the driver's compatibility check and map-to-gpu's PDL use it)."""
    m = _ARCH.match(arch or "")
    if not m:
        raise CompileError(f"cuda: {arch!r} is not a CUDA arch (expected sm_NN, e.g. sm_90)")
    return int(m.group(1)), m.group(2)


def check_arch(arch: str) -> str:
    """``arch`` if it names an NVPTX arch (``sm_90``, ``sm_90a``, ``sm_100f``...), else a
    CompileError."""
    m = _ARCH.match(arch or "")
    if not m or int(m.group(1)) < 50:
        raise CompileError(f"ptx: {arch!r} is not a CUDA arch this compiler targets (sm_50 or "
                           "newer, written like 'sm_90')")
    return arch


@attrs.frozen
class Target:
    """One machine that code is generated for (see the module docstring).

    ``shared_per_block`` is the most shared memory one block may use after opting in (dynamic
    shared memory past 48 KiB); ``shared_per_block_static`` what it may use without; the
    ``shared_per_sm`` is what all blocks resident on one SM share (a block's footprint there
    includes 1 KiB the driver reserves per block)."""

    kind: str                          # "cuda" or "cpu"
    arch: str                          # "sm_90", "sm_90a", ...; the host CPU's name on cpu
    name: str = ""                     # the GPU's name where known ("h200", "NVIDIA H100 ...")
    sms: int = 0                       # streaming multiprocessors (cpu: 0)
    shared_per_block: int = 0          # bytes, opt-in maximum
    shared_per_block_static: int = 48 * KiB
    shared_per_sm: int = 0             # bytes
    registers_per_sm: int = 65536
    max_threads_per_sm: int = 2048
    max_threads_per_block: int = 1024
    l2_bytes: int = 0
    features: frozenset = attrs.field(default=frozenset(), converter=frozenset)

    def __attrs_post_init__(self):
        if self.kind not in ("cuda", "cpu"):
            raise CompileError(f"target: kind {self.kind!r} is neither 'cuda' nor 'cpu'")
        bad = sorted(set(self.features) - set(FEATURES))
        if bad:
            raise CompileError(f"target: unknown features {bad}; the features are "
                               f"{', '.join(FEATURES)}")
        if self.kind == "cuda":
            check_arch(self.arch)

    # -- queries --------------------------------------------------------------------------
    def has(self, feature: str) -> bool:
        """Whether the target has instruction ``feature`` (one of :data:`FEATURES`)."""
        if feature not in FEATURES:
            raise CompileError(f"target: unknown feature {feature!r}; the features are "
                               f"{', '.join(FEATURES)}")
        return feature in self.features

    @property
    def sm(self) -> int:
        """The arch's number: 90 for ``sm_90`` and ``sm_90a``."""
        return arch_number(self.arch)[0]

    @property
    def resident_threads(self) -> int:
        """Threads the whole GPU holds at once (SMs x threads per SM)."""
        return self.sms * self.max_threads_per_sm

    def with_arch(self, arch: str) -> "Target":
        """This machine, code built for ``arch`` (``sm_90a`` for a wgmma program on an sm_90)."""
        return attrs.evolve(self, arch=arch)

    # -- data -----------------------------------------------------------------------------
    def to_dict(self) -> dict:
        """JSON-ready fields (plan headers, cache keys); :meth:`from_dict` reads them back."""
        d = attrs.asdict(self)
        d["features"] = sorted(self.features)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "Target":
        try:
            return cls(**{k: (frozenset(v) if k == "features" else v) for k, v in d.items()})
        except TypeError as e:
            raise CompileError(f"target: not a target description ({e})") from None

    def key(self) -> tuple:
        """What code generation depends on: equal keys give equal code."""
        return tuple(sorted((k, tuple(v) if isinstance(v, list) else v)
                            for k, v in self.to_dict().items() if k != "name"))

    # -- construction ---------------------------------------------------------------------
    @classmethod
    def preset(cls, name: str) -> "Target":
        """A named GPU (:data:`PRESETS`: ``h200``, ``h100-pcie``, ``a100``, ``l4``, ...) or an
        arch (``sm_90``: :data:`ARCH_PRESETS`' first GPU of that arch, the arch kept as
        written, so ``sm_90a`` is an H100 SXM building sm_90a code)."""
        if name in PRESETS:
            return PRESETS[name]
        check_arch(name)
        number, _ = arch_number(name)
        base = f"sm_{number}"
        if base in ARCH_PRESETS:
            return PRESETS[ARCH_PRESETS[base][0]].with_arch(name)
        # an arch without a preset: the sizes of the newest preset before it, its own features
        older = [a for a in ARCH_PRESETS if arch_number(a)[0] < number]
        sizes = PRESETS[ARCH_PRESETS[max(older, key=lambda a: arch_number(a)[0])][0]
                        if older else "t4"]
        return attrs.evolve(sizes, arch=name, name=f"generic {base}",
                            features=features_for(number))

    @classmethod
    def resolve(cls, arch: str | None = None) -> "Target":
        """The cuda target to build for. ``arch`` (an arch or a preset name) when given, else
        ``PTXC_CUDA_ARCH``, else the GPU here, else the sm_90 preset. Where the GPU here has
        the arch asked for, the target describes that GPU (its own SM count and limits);
        elsewhere, the arch's preset: a build for another GPU needs no GPU."""
        if arch is None:
            arch = os.environ.get("PTXC_CUDA_ARCH") or None
        if arch is not None and arch in PRESETS:
            return PRESETS[arch]
        here = device_target()
        if arch is None:
            return here if here is not None else cls.preset(DEFAULT_ARCH)
        if here is not None and arch_number(here.arch)[0] == arch_number(arch)[0]:
            return here.with_arch(arch)
        return cls.preset(arch)

    @classmethod
    def host(cls) -> "Target":
        """The cpu target: this host, as llvmlite's JIT sees it."""
        import llvmlite.binding as llvm
        return cls(kind="cpu", arch=llvm.get_host_cpu_name(), name="host",
                   shared_per_block_static=0, registers_per_sm=0, max_threads_per_sm=0,
                   max_threads_per_block=0)


DEFAULT_ARCH = "sm_90"


def _gpu(name, arch, sms, shared_per_block, shared_per_sm, max_threads_per_sm, l2_bytes,
         features) -> Target:
    return Target(kind="cuda", arch=arch, name=name, sms=sms, shared_per_block=shared_per_block,
                  shared_per_sm=shared_per_sm, max_threads_per_sm=max_threads_per_sm,
                  l2_bytes=l2_bytes, features=features)


#: named GPUs (CUDA C Programming Guide, compute capability tables; NVIDIA data sheets)
PRESETS: dict[str, Target] = {
    "h100-sxm": _gpu("h100-sxm", "sm_90", 132, 227 * KiB, 228 * KiB, 2048, 50 * MiB, _HOPPER),
    "h200": _gpu("h200", "sm_90", 132, 227 * KiB, 228 * KiB, 2048, 50 * MiB, _HOPPER),
    "h100-pcie": _gpu("h100-pcie", "sm_90", 114, 227 * KiB, 228 * KiB, 2048, 50 * MiB, _HOPPER),
    "l4": _gpu("l4", "sm_89", 58, 99 * KiB, 100 * KiB, 1536, 48 * MiB, _ADA),
    "rtx4090": _gpu("rtx4090", "sm_89", 128, 99 * KiB, 100 * KiB, 1536, 72 * MiB, _ADA),
    "a10": _gpu("a10", "sm_86", 72, 99 * KiB, 100 * KiB, 1536, 6 * MiB, _AMPERE),
    "rtx3090": _gpu("rtx3090", "sm_86", 82, 99 * KiB, 100 * KiB, 1536, 6 * MiB, _AMPERE),
    "t4": _gpu("t4", "sm_75", 40, 64 * KiB, 64 * KiB, 1024, 4 * MiB, ()),
    "a100": _gpu("a100", "sm_80", 108, 163 * KiB, 164 * KiB, 2048, 40 * MiB, _AMPERE),
}

#: the GPUs of each arch with a preset; the first is the arch's own preset
ARCH_PRESETS: dict[str, tuple[str, ...]] = {
    "sm_75": ("t4",),
    "sm_80": ("a100",),
    "sm_86": ("a10", "rtx3090"),
    "sm_89": ("l4", "rtx4090"),
    "sm_90": ("h100-sxm", "h200", "h100-pcie"),
}


def features_for(sm: int) -> tuple[str, ...]:
    """The features of an arch number (a GPU asked at run time carries its arch's)."""
    if sm == 90:
        return _HOPPER
    if sm > 90:
        return _AFTER_HOPPER
    if sm >= 89:
        return _ADA
    if sm >= 80:
        return _AMPERE
    return ()


@functools.lru_cache(maxsize=1)
def device_target() -> Target | None:
    """The current GPU as a Target (asked of the driver once), or None when there is none."""
    try:
        from numba import cuda
        if not cuda.is_available():
            return None
        dev = cuda.get_current_device()
    except Exception:  # no driver, no numba-cuda: no GPU to build for or run on
        return None
    major, minor = dev.compute_capability
    name = dev.name.decode() if isinstance(dev.name, bytes) else str(dev.name)
    return Target(
        kind="cuda", arch=f"sm_{major}{minor}", name=name,
        sms=int(dev.MULTIPROCESSOR_COUNT),
        shared_per_block=int(dev.MAX_SHARED_MEMORY_PER_BLOCK_OPTIN),
        shared_per_sm=int(dev.MAX_SHARED_MEMORY_PER_MULTIPROCESSOR),
        registers_per_sm=int(dev.MAX_REGISTERS_PER_MULTIPROCESSOR),
        max_threads_per_sm=int(dev.MAX_THREADS_PER_MULTIPROCESSOR),
        max_threads_per_block=int(dev.MAX_THREADS_PER_BLOCK),
        l2_bytes=int(dev.L2_CACHE_SIZE), features=features_for(10 * major + minor))


def chip_name(target: Target) -> str:
    """A cuda target's chip as one name, whether it was read from the driver ("NVIDIA H100 80GB
    HBM3") or is a preset ("h100-sxm"): the preset whose family (the part of its name before
    a dash: h100, h200, a100, l4, ...) appears in the name, with the same arch generation and SM
    count; else the name as given. Timing caches key on it, so a cache tuned on a GPU serves a
    build for its preset without one. Example: "NVIDIA H100 80GB HBM3", sm_90, 132 SMs ->
    "h100-sxm"; "NVIDIA H100 PCIe", 114 SMs -> "h100-pcie"; "NVIDIA GH200 480GB" -> itself."""
    if target.kind != "cuda" or target.name in PRESETS:
        return target.name
    import re
    words = re.findall(r"[a-z0-9]+", target.name.lower())
    words += [a + b for a, b in zip(words, words[1:])]     # "RTX 4090" -> rtx4090
    for name, p in PRESETS.items():
        if p.name.split("-")[0] in words and p.sm == target.sm and p.sms == target.sms:
            return name
    return target.name


def device_arch() -> str | None:
    """The CUDA arch of the current GPU ("sm_90"), or None when there is none."""
    t = device_target()
    return t.arch if t is not None else None
