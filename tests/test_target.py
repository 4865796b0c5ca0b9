"""ptxc.target: the presets, resolution (environment, device, arch) and the data round trip."""

import attrs
import pytest

from ptxc.errors import CompileError
from ptxc.target import ARCH_PRESETS, FEATURES, PRESETS, Target, features_for
import ptxc.target as target_mod


@pytest.mark.parametrize("arch, sms, wgmma", [("sm_80", 108, False), ("sm_86", 72, False),
                                              ("sm_89", 58, False), ("sm_90", 132, True)])
def test_each_arch_has_a_preset(arch, sms, wgmma):
    t = Target.preset(arch)
    assert (t.kind, t.arch, t.sms, t.has("wgmma")) == ("cuda", arch, sms, wgmma)
    assert t.has("mma_f16") and t.has("mma_s8") and t.has("cp_async")
    assert 48 * 1024 <= t.shared_per_block < t.shared_per_sm
    assert arch in ARCH_PRESETS


def test_named_gpus_differ_where_the_chips_do():
    assert Target.preset("h100-pcie").sms == 114
    assert Target.preset("h200").sms == Target.preset("h100-sxm").sms == 132
    assert Target.preset("a100").shared_per_block == 163 * 1024
    assert Target.preset("l4").max_threads_per_sm == 1536
    assert Target.preset("sm_90a").arch == "sm_90a" and Target.preset("sm_90a").has("wgmma")


def test_an_arch_without_a_preset_takes_the_sizes_before_it():
    t = Target.preset("sm_100")
    assert t.arch == "sm_100" and t.sms == PRESETS["h100-sxm"].sms
    assert not t.has("wgmma") and t.has("tma")


def test_bad_names_are_compile_errors():
    with pytest.raises(CompileError, match="not a CUDA arch"):
        Target.preset("gfx90a")
    with pytest.raises(CompileError, match="unknown feature"):
        Target.preset("sm_90").has("avx512")
    with pytest.raises(CompileError, match="kind"):
        Target(kind="tpu", arch="v4")


def test_resolve_reads_the_environment_then_the_device(monkeypatch):
    monkeypatch.setattr(target_mod, "device_target", lambda: None)
    monkeypatch.delenv("PTXC_CUDA_ARCH", raising=False)
    assert Target.resolve() == Target.preset("sm_90")
    monkeypatch.setenv("PTXC_CUDA_ARCH", "sm_80")
    assert Target.resolve().arch == "sm_80"
    monkeypatch.setenv("PTXC_CUDA_ARCH", "h100-pcie")
    assert Target.resolve().sms == 114
    assert Target.resolve("sm_89").name == "l4"     # an explicit arch wins over the environment


def test_resolve_describes_the_gpu_here_for_its_own_arch(monkeypatch):
    here = PRESETS["h100-pcie"]
    monkeypatch.setattr(target_mod, "device_target", lambda: here)
    monkeypatch.delenv("PTXC_CUDA_ARCH", raising=False)
    assert Target.resolve() is here
    assert Target.resolve("sm_90a") == here.with_arch("sm_90a")   # its 114 SMs, not a preset's
    assert Target.resolve("sm_80").name == "a100"                 # another arch: the preset


def test_data_round_trip_and_key():
    for t in list(PRESETS.values()) + [Target.host()]:
        d = t.to_dict()
        assert Target.from_dict(d) == t
        assert set(d["features"]) <= set(FEATURES)
    assert Target.preset("h200").key() == Target.preset("h100-sxm").key()   # same code
    assert Target.preset("h100-pcie").key() != Target.preset("h100-sxm").key()
    with pytest.raises(CompileError, match="not a target"):
        Target.from_dict({"kind": "cuda", "arch": "sm_90", "warp_size": 32})


_AMPERE = {"mma_f16", "mma_bf16", "mma_tf32", "mma_s8", "cp_async", "bf16"}
#: the instruction features of each compute capability, written out from NVIDIA's tables (PTX ISA:
#: mma.sync shapes, cp.async and bf16 from sm_80; e4m3/e5m2 mma from sm_89; wgmma on sm_90a
#: alone; cp.async.bulk.tensor and griddepcontrol from sm_90)
FEATURES_BY_SM = {75: set(), 80: _AMPERE, 86: _AMPERE, 87: _AMPERE, 89: _AMPERE | {"fp8"},
                  90: _AMPERE | {"fp8", "wgmma", "tma", "pdl"},
                  100: _AMPERE | {"fp8", "tma", "pdl"}, 120: _AMPERE | {"fp8", "tma", "pdl"}}


@pytest.mark.parametrize("sm", sorted(FEATURES_BY_SM))
def test_the_features_of_each_compute_capability(sm):
    """features_for describes a GPU asked at run time (device_target) and an arch without a
    preset: it must give each compute capability the features NVIDIA lists for it, and a GPU
    of a preset's arch exactly the preset's (an L4 asked at run time has fp8 as the l4 preset
    does)."""
    assert set(features_for(sm)) == FEATURES_BY_SM[sm]
    for name, p in PRESETS.items():
        if p.sm == sm:
            assert set(p.features) == FEATURES_BY_SM[sm], name


def test_host_is_the_cpu_target():
    t = Target.host()
    assert t.kind == "cpu" and t.sms == 0 and not t.features


def test_device_target_asks_only_attributes_the_driver_has(monkeypatch):
    """device_target reads the GPU through numba's Device attributes, which map NAME to the
    driver's CU_DEVICE_ATTRIBUTE_NAME: a fake device answering only names that enum has (an
    H100 PCIe's values) must give the full description."""
    from numba import cuda
    from numba.cuda.cudadrv.driver import binding
    enum = binding.CUdevice_attribute
    values = {"MULTIPROCESSOR_COUNT": 114, "MAX_SHARED_MEMORY_PER_BLOCK_OPTIN": 232448,
              "MAX_SHARED_MEMORY_PER_MULTIPROCESSOR": 233472,
              "MAX_REGISTERS_PER_MULTIPROCESSOR": 65536, "MAX_THREADS_PER_MULTIPROCESSOR": 2048,
              "MAX_THREADS_PER_BLOCK": 1024, "L2_CACHE_SIZE": 50 * 1024 * 1024}

    class FakeDevice:
        compute_capability = (9, 0)
        name = b"NVIDIA H100 PCIe"

        def __getattr__(self, attr):
            if not hasattr(enum, f"CU_DEVICE_ATTRIBUTE_{attr}"):
                raise AttributeError(f"the driver has no device attribute {attr}")
            return values[attr]

    monkeypatch.setattr(cuda, "is_available", lambda: True)
    monkeypatch.setattr(cuda, "get_current_device", lambda: FakeDevice())
    target_mod.device_target.cache_clear()
    try:
        t = target_mod.device_target()
    finally:
        target_mod.device_target.cache_clear()
    assert t == attrs.evolve(PRESETS["h100-pcie"], name="NVIDIA H100 PCIe")
