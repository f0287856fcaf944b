"""Datasheet bandwidths of the links between GPUs, for bus-bandwidth shares and communication projections.

`gb_s` is the bandwidth one GPU can send in one direction (GB/s = 1e9 bytes/s), the quantity NCCL-tests'
bus bandwidth is compared with: NVIDIA's datasheets quote NVLink as the total of both directions (e.g.
H100 SXM "NVLink: 900 GB/s"), so half of it is listed here; PCIe x16 likewise (H100 "PCIe Gen5: 128
GB/s"); InfiniBand per port and direction (400 Gb/s NDR = 50 GB/s).

`latency_us` is NOT a datasheet number: it is an assumed per-step latency of a ring collective over that
link (the order of NCCL-tests' small-message times), used only by the projection's alpha term and
labelled as an assumption wherever it is shown.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import pandas as pd


@dataclass(frozen=True)
class LinkSpec:
    key: str
    name: str
    gb_s: float  # per GPU, per direction
    latency_us: float  # assumed per ring step (not datasheet)
    source: str


LINKS: dict[str, LinkSpec] = {
    link.key: link
    for link in (
        LinkSpec("nvlink3", "NVLink 3 (A100 SXM)", 300, 3.0,
                 "NVIDIA A100 datasheet: NVLink 600 GB/s (both directions)"),
        LinkSpec("nvlink4", "NVLink 4 (H100 / H200 SXM)", 450, 3.0,
                 "NVIDIA H100 and H200 datasheets: NVLink 900 GB/s (both directions)"),
        LinkSpec("nvlink5", "NVLink 5 (B200)", 900, 3.0,
                 "NVIDIA Blackwell datasheet: NVLink 1.8 TB/s (both directions)"),
        LinkSpec("pcie4", "PCIe Gen4 x16", 32, 5.0, "NVIDIA A100 PCIe datasheet: PCIe Gen4 64 GB/s (both directions)"),
        LinkSpec("pcie5", "PCIe Gen5 x16", 64, 5.0, "NVIDIA H100 datasheet: PCIe Gen5 128 GB/s (both directions)"),
        LinkSpec("ib-hdr", "InfiniBand HDR (200 Gb/s per GPU)", 25, 6.0, "NVIDIA ConnectX-6: 200 Gb/s per port"),
        LinkSpec("ib-ndr", "InfiniBand NDR (400 Gb/s per GPU)", 50, 6.0, "NVIDIA ConnectX-7: 400 Gb/s per port"),
    )
}

# The GPU-to-GPU link of an SXM part within one host (its NVLink generation), by datasheet key of gpu_specs.
_NVLINK_OF_GPU = {"a100-40gb": "nvlink3", "a100-80gb": "nvlink3", "h100-sxm": "nvlink4", "h200": "nvlink4"}


def link_for(gpu_key: str | None, topology: str | None) -> LinkSpec | None:
    """The link a run's GPUs talked over: NVLink of the GPU's generation where `nvidia-smi topo -m` shows NVLink
    between them (NV<n>), else PCIe of that generation; None where unknown (a CPU run over gloo)."""
    if gpu_key is None or topology is None:
        return None
    if "NV" in topology.replace("NVIDIA", "") and gpu_key in _NVLINK_OF_GPU:
        return LINKS[_NVLINK_OF_GPU[gpu_key]]
    return LINKS["pcie5" if gpu_key in ("h100-sxm", "h100-pcie", "h200") else "pcie4"]


def links_frame() -> pd.DataFrame:
    """The table as a frame (one row per link), what `analysis.communication` projects over."""
    return pd.DataFrame([asdict(link) for link in LINKS.values()])
