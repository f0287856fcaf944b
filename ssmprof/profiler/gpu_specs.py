"""Datasheet peaks of the GPUs ssmprof knows, for rooflines and projections where nothing was measured.

Every value here is a vendor datasheet number (dense, no sparsity; SXM boost clocks unless the part is
PCIe), labelled `source="datasheet"`. `ssmprof calibrate` measures real ceilings on the GPU at hand; those
take precedence wherever they exist.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GpuSpec:
    key: str
    name: str
    sm_count: int
    memory_gb: float
    l2_mb: float | None  # None where the datasheet does not state it
    dram_tb_s: float
    bf16_tflops: float  # dense tensor core
    tf32_tflops: float  # dense tensor core
    fp32_tflops: float  # vector (non-tensor)
    fp64_tflops: float | None  # vector (non-tensor); None where the datasheet does not state it
    source: str = "datasheet"

    @property
    def ridge_bf16(self) -> float:
        """Arithmetic intensity (FLOP/byte at DRAM) where bf16 tensor work stops being memory-bound."""
        return self.bf16_tflops / self.dram_tb_s


SPECS: dict[str, GpuSpec] = {
    spec.key: spec
    for spec in (
        GpuSpec("a100-40gb", "NVIDIA A100 SXM4 40GB", 108, 40, 40, 1.555, 312, 156, 19.5, 9.7),
        GpuSpec("a100-80gb", "NVIDIA A100 SXM4 80GB", 108, 80, 40, 2.039, 312, 156, 19.5, 9.7),
        GpuSpec("h100-sxm", "NVIDIA H100 SXM5 80GB", 132, 80, 50, 3.35, 989.4, 494.7, 67, 34),
        GpuSpec("h100-pcie", "NVIDIA H100 PCIe 80GB", 114, 80, 50, 2.0, 756.5, 378, 51, 26),
        GpuSpec("h200", "NVIDIA H200 SXM 141GB", 132, 141, None, 4.8, 989.4, 494.7, 67, 34),
        GpuSpec("l40s", "NVIDIA L40S", 142, 48, 96, 0.864, 362.05, 183, 91.6, None),
    )
}

# Substrings of the names CUDA reports (torch.cuda.get_device_name), most specific first.
_NAME_PATTERNS = (
    ("H100 PCIe", "h100-pcie"),
    ("H100", "h100-sxm"),
    ("H200", "h200"),
    ("A100-SXM4-40GB", "a100-40gb"),
    ("A100-PCIE-40GB", "a100-40gb"),
    ("A100", "a100-80gb"),
    ("L40S", "l40s"),
)


def spec_for(device_name: str) -> GpuSpec | None:
    """The datasheet entry for a CUDA device name, or None for a GPU not in the table."""
    for pattern, key in _NAME_PATTERNS:
        if pattern.lower() in device_name.lower():
            return SPECS[key]
    return None
