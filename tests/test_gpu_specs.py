import pytest

from ssmprof.profiler.gpu_specs import SPECS, spec_for


@pytest.mark.parametrize(
    ("reported", "key"),
    [
        ("NVIDIA H100 80GB HBM3", "h100-sxm"),  # what our H100 host reports
        ("NVIDIA H100 PCIe", "h100-pcie"),
        ("NVIDIA H200", "h200"),
        ("NVIDIA A100-SXM4-80GB", "a100-80gb"),
        ("NVIDIA A100-SXM4-40GB", "a100-40gb"),
        ("NVIDIA L40S", "l40s"),
        ("NVIDIA GeForce RTX 4090", None),
    ],
)
def test_device_names_map_to_datasheet_entries(reported, key):
    spec = spec_for(reported)
    assert (spec.key if spec else None) == key


def test_every_entry_is_labelled_and_plausible():
    for spec in SPECS.values():
        assert spec.source == "datasheet"
        assert spec.bf16_tflops >= spec.tf32_tflops > spec.fp32_tflops >= (spec.fp64_tflops or 0)
        assert 50 < spec.ridge_bf16 < 450  # FLOP/byte: every listed GPU is memory-bound below this


def test_h200_differs_from_h100_only_in_memory():
    h100, h200 = SPECS["h100-sxm"], SPECS["h200"]
    assert h200.bf16_tflops == h100.bf16_tflops and h200.sm_count == h100.sm_count
    assert h200.dram_tb_s / h100.dram_tb_s == pytest.approx(1.43, abs=0.01)
