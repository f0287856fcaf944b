"""The kernel adapter: mamba_ssm imports without its extension; plans refuse silent GPU fallbacks."""

import sys

import pytest

from ssmprof import kernels
from ssmprof.errors import KernelUnavailable
from ssmprof.kernels import Availability, plan_kernels
from ssmprof.profiler import environment


def test_mamba_ssm_imports_and_missing_extension_names_the_fix():
    module = kernels.mamba_ssm()
    assert module.__version__ == "2.3.2.post1"
    if not getattr(sys.modules["selective_scan_cuda"], "__ssmprof_missing__", False):
        pytest.skip("selective_scan_cuda is built here")
    with pytest.raises(KernelUnavailable, match="make kernels"):
        sys.modules["selective_scan_cuda"].fwd()


def test_mamba_ssm_is_imported_without_text_generation_and_its_lm_head_model_still_builds():
    """A fresh process (the import happens once): transformers' generation stack stays out, which every counter
    pass's child would otherwise import (7 s on the H100 host), and mamba_ssm's own LM (the benchmark's
    comparison) still builds and refuses only to generate."""
    import subprocess

    script = """
import sys
from ssmprof.kernels import mamba_ssm
mamba_ssm()
from mamba_ssm.models.config_mamba import MambaConfig
from mamba_ssm.models.mixer_seq_simple import MambaLMHeadModel
model = MambaLMHeadModel(MambaConfig(d_model=64, n_layer=1, vocab_size=100, ssm_cfg={"layer": "Mamba2", "headdim": 16}))
try:
    model.generate(None, 1)
except Exception as exc:
    print(type(exc).__name__, "transformers.generation" in sys.modules, sum(p.numel() for p in model.parameters()))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.stdout.split()[:2] == ["KernelUnavailable", "False"], done.stderr[-2000:]
    assert int(done.stdout.split()[2]) > 0


def test_cpu_plan_is_all_reference():
    plan = plan_kernels(("ssd", "conv1d", "norm", "attention"), "cpu")
    assert plan.device == "cpu"
    assert {c.impl for c in plan.choices.values()} == {"torch-reference"}
    assert all(not c.fused for c in plan.choices.values())


def gpu_host(**overrides):
    fields = dict(cuda=True, triton=True, causal_conv1d=True, selective_scan=True, sdpa_flash=True,
                  flash_attn=False)
    return Availability(**{**fields, **overrides})


@pytest.mark.parametrize(
    ("have", "dtype", "op", "impl"),
    [
        (gpu_host(), "bf16", "ssd", "triton-fused"),
        (gpu_host(), "bf16", "conv1d", "causal-conv1d-cuda"),
        (gpu_host(), "bf16", "norm", "triton-fused"),
        (gpu_host(), "bf16", "attention", "sdpa-flash"),
        (gpu_host(flash_attn=True), "bf16", "attention", "flash-attn"),
        (gpu_host(), "bf16", "selective_scan", "selective-scan-cuda"),
    ],
)
def test_gpu_plan_takes_fused_kernels(monkeypatch, have, dtype, op, impl):
    monkeypatch.setattr(Availability, "probe", classmethod(lambda cls, ops=None: have))
    plan = plan_kernels((op,), "cuda", dtype=dtype)
    assert plan.impl(op) == impl and plan.choices[op].fused


@pytest.mark.parametrize(
    ("have", "dtype", "op", "fallback", "reason"),
    [
        (gpu_host(causal_conv1d=False), "bf16", "conv1d", "torch-conv1d", "causal-conv1d not built"),
        (gpu_host(causal_conv1d=False), "bf16", "ssd", "triton", "causal-conv1d not built"),
        (gpu_host(selective_scan=False), "bf16", "selective_scan", "torch-reference", "selective_scan_cuda"),
        (gpu_host(), "fp32", "attention", "sdpa", "needs bf16 or fp16"),
        (gpu_host(sdpa_flash=False), "bf16", "attention", "sdpa", "flash backend unavailable"),
    ],
)
def test_gpu_fallback_is_an_error_unless_allowed(monkeypatch, have, dtype, op, fallback, reason):
    monkeypatch.setattr(Availability, "probe", classmethod(lambda cls, ops=None: have))
    with pytest.raises(KernelUnavailable, match="--allow-fallback") as error:
        plan_kernels((op,), "cuda", dtype=dtype)
    assert reason in str(error.value)
    plan = plan_kernels((op,), "cuda", allow_fallback=True, dtype=dtype)
    assert plan.impl(op) == fallback and not plan.choices[op].fused
    assert reason in plan.provenance()[op]


def test_no_triton_gpu_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(Availability, "probe", classmethod(lambda cls, ops=None: gpu_host(triton=False)))
    with pytest.raises(KernelUnavailable, match="Triton"):
        plan_kernels(("ssd",), "cuda", allow_fallback=True)


def test_doctor_says_when_only_the_cuda_extension_is_missing():
    report = environment.stack_report()
    if kernels._extension_built("causal_conv1d_cuda"):
        pytest.skip("causal_conv1d_cuda is built here")
    assert report["causal_conv1d"] == "1.7.0 installed, CUDA extension not built (make kernels)"
    assert environment.software_versions()["causal_conv1d"] is None  # run.json's versions: unchanged


def test_fused_kernel_names_live_in_the_adapter():
    from ssmprof.analysis.launches.categories import categorize
    from ssmprof.analysis.limits.analytic_work import SsdShape, ssd_forward_model

    shape = SsdShape(1, 512, 4, 64, 128, 1, 256)
    assert tuple(ssd_forward_model(shape)["kernel"]) == kernels.SSD_FORWARD_KERNELS
    for stem in kernels.FUSED_KERNELS["ssd"] + kernels.FUSED_KERNELS["selective_scan"]:
        assert categorize(f"_{stem}_fwd_kernel") == "SSM scan"
    assert categorize(f"{kernels.FUSED_KERNELS['conv1d'][0]}_fwd_kernel") == "convolution"
