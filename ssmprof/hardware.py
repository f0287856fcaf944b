"""Hardware facts, in one place: the GPUs' datasheet rows, the links between GPUs, the device profiles
`ssmprof calibrate` measures, and which ceilings a run's roofline stands on.

Profiler, analysis and pipeline all read the hardware from here; this module reads only the contract
(`schema`), so no analysis has to reach into the profiler for a datasheet.

Ceilings, one set per GPU. A run is judged on the ceilings of its own GPU, chosen by `run_ceilings` in this
order: a device profile given explicitly (`--device-profile`), then `device-profile.json` inside the run
directory or in its parent folder (where the bundled ones sit: `reference/<gpu>/device-profile.json`), then
the bundled device profile of the run's GPU model, then that model's datasheet row; a bundled run's own directory is
not searched (`profile_folders`), so the reference pages are one set per GPU. A device profile applies
only to runs of the GPU it was measured on (same device name): another GPU's ceilings would put every kernel
on the wrong roof with nothing on the page to say so. The ceilings never depend on the other runs of a report
and are never raised to what a launch reaches: a launch above a calibrated ceiling is a defect of the
calibration, reported as one (`analysis.limits.roofline.calibration_defects`), not a reason to move the roof.

Datasheet values are dense (no sparsity), SXM boost clocks unless the part is PCIe, labelled "datasheet".
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from functools import cache
from pathlib import Path

import pandas as pd

from ssmprof.schema import DeviceProfile, read_document

REFERENCE = Path(__file__).parent / "reference"  # bundled runs and device profiles (`ssmprof.bundled`)
DEVICE_PROFILE = "device-profile.json"  # a device profile's name where rooflines look for it beside a run
DATASHEET = "datasheet"


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
    source: str = DATASHEET

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


# How far a device's memory may sit from its datasheet row's and still be that part: the driver reports the
# usable bytes (an H100 80GB 85.0e9, an H200 141GB 150.1e9, each 6 % over the datasheet's decimal GB), so a row
# off by more than 10 % is another part with a name the table matched wrongly.
MEMORY_TOLERANCE = 0.10


def identity_note(device_name: str, memory_bytes: float | None) -> str | None:
    """Why the datasheet row `spec_for` picks for `device_name` is not the GPU the host has, judged by its memory
    (MEMORY_TOLERANCE; an H100 read as an H200 would have 80 of 141 GB); None where they agree or nothing tells."""
    spec = spec_for(device_name)
    if spec is None or not memory_bytes:
        return None
    if abs(memory_bytes / 1e9 / spec.memory_gb - 1) <= MEMORY_TOLERANCE:
        return None
    return (f"{device_name} reports {memory_bytes / 1e9:.1f} GB, its datasheet row ({spec.name}) {spec.memory_gb:g} "
            "GB: the host's GPU is not the part its name matched")


def spec_for(device_name: str) -> GpuSpec | None:
    """The datasheet entry for a CUDA device name, or None for a GPU not in the table."""
    for pattern, key in _NAME_PATTERNS:
        if pattern.lower() in device_name.lower():
            return SPECS[key]
    return None


# --- Links between GPUs. `gb_s` is what one GPU can send in one direction (GB/s = 1e9 bytes/s), the quantity
# NCCL-tests' bus bandwidth is compared with: NVIDIA's datasheets quote NVLink as the total of both directions
# (H100 SXM "NVLink: 900 GB/s"), so half of it is listed; PCIe x16 likewise (H100 "PCIe Gen5: 128 GB/s");
# InfiniBand per port and direction (400 Gb/s NDR = 50 GB/s). `latency_us` is NOT a datasheet number: an
# assumed per-step latency of a ring collective over the link (the order of NCCL-tests' small-message times),
# used only by the communication projection's alpha term and labelled as an assumption wherever it is shown.


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

# The GPU-to-GPU link of an SXM part within one host (its NVLink generation), by datasheet key.
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
    """The link table as a frame (one row per link), what `analysis.step.communication` projects over."""
    return pd.DataFrame([asdict(link) for link in LINKS.values()])


# --- Peaks and ceilings.


@dataclass(frozen=True)
class Peaks:
    """Datasheet peaks of the GPU the counters come from (dense, per second), for the counter self-checks."""

    dram_bytes: float
    bf16_flops: float
    tf32_flops: float
    fp32_flops: float


def datasheet_peaks(gpu_name: str) -> Peaks | None:
    """Datasheet peaks for the counter self-checks (None for a GPU not in the table: rates go unchecked)."""
    spec = spec_for(gpu_name)
    if spec is None:
        return None
    return Peaks(dram_bytes=spec.dram_tb_s * 1e12, bf16_flops=spec.bf16_tflops * 1e12,
                 tf32_flops=spec.tf32_tflops * 1e12, fp32_flops=spec.fp32_tflops * 1e12)


@dataclass(frozen=True)
class Ceilings:
    """The roofs a roofline stands on, and where they come from (`source`, shown beside every roofline)."""

    dram_gb_s: float
    l2_gb_s: float | None
    bf16_tensor_tflops: float
    fp32_tflops: float
    source: str  # "datasheet", or the device profile's source and where it was found
    l1_gb_s: float | None = None  # measured only (no datasheet figure)

    @classmethod
    def from_profile(cls, profile: DeviceProfile, where: str) -> Ceilings:
        measured = profile.measured
        return cls(measured.dram_gb_s, measured.l2_gb_s, measured.bf16_tensor_tflops, measured.fp32_tflops,
                   f"{measured.source}, {where}", measured.l1_gb_s)

    @classmethod
    def from_datasheet(cls, spec: GpuSpec) -> Ceilings:
        return cls(spec.dram_tb_s * 1e3, None, spec.bf16_tflops, spec.fp32_tflops, DATASHEET)


def read_device_profile(path: Path | None) -> DeviceProfile | None:
    return read_document(DeviceProfile, path) if path is not None else None


def bundled_profile(gpu_key: str) -> Path:
    """Where the bundled device profile of a GPU model (a datasheet key) sits, whether or not one is bundled."""
    return REFERENCE / gpu_key / DEVICE_PROFILE


@cache
def _bundled(gpu_key: str) -> DeviceProfile | None:
    path = bundled_profile(gpu_key)
    return read_device_profile(path) if path.is_file() else None


def model_ceilings(gpu_key: str, gpu_name: str | None = None) -> Ceilings:
    """The ceilings of a GPU model (a datasheet key) without a run of it: its bundled device profile where one
    was measured on a GPU of that name (`gpu_name`; any name of the model where None), else its datasheet row."""
    profile = _bundled(gpu_key)
    if profile is not None and gpu_name in (None, profile.gpu.name):
        return Ceilings.from_profile(profile, f"bundled device profile of the {profile.gpu.name}")
    return Ceilings.from_datasheet(SPECS[gpu_key])


def profile_folders(run_dir: Path) -> tuple[Path, ...]:
    """The folders whose `device-profile.json` the run at `run_dir` may stand on: its own and its parent folder; for a
    bundled run (inside REFERENCE) its parent folder only. Rule: the reference pages stand on one set of ceilings per
    GPU, whatever page shows a run (suite, models, parallel, sweep, compare, Results), the README glossary's promise:
    the profile of its GPU's folder, beside the suite's runs and found by GPU model for the others (`model_ceilings`).
    A profile inside a bundled run's directory is the calibration of the host that ran it, kept as its record, not
    applied: applied, the H100's three calibrations (bundled 833.5, mamba3-lm's host 830.5, the shipped models' host
    830.2 TFLOP/s tensor, 0.4 % apart) gave one GPU three tensor peaks across the pages, and the suite's chart one
    run's roof over six runs judged on another's."""
    if run_dir.resolve().is_relative_to(REFERENCE.resolve()):
        return (run_dir.parent,)
    return (run_dir, run_dir.parent)


# What a report says of ceilings calibrated before the ceiling probes: their device profile names no kernel that set
# each ceiling (`DeviceProfile.set_by`). The bundled H200 profile is one: every H200 request since the probes ran on
# an H100 (two on 2026-11-27); the H200 mamba2-lm has 88 launches above its roof (up to 106.3 %), 5 of them beyond
# the calibration tolerance (tests/test_hardware.py).
PRE_PROBE_NOTE = ("these ceilings were calibrated before ssmprof's ceiling probes (the device profile names no kernel "
                  "that set them) and not since on this GPU: launches above them are counted as calibration defects, "
                  "and % of roof may pass 100; `ssmprof calibrate` on this GPU measures them again")


def run_ceilings(gpu_name: str, run_dir: Path | None = None,
                 given: DeviceProfile | None = None) -> tuple[Ceilings | None, list[str]]:
    """(ceilings, notes) of a run on the GPU named `gpu_name` whose directory is `run_dir`, by the rule of this
    module's docstring; None (no roofline) for a GPU without a profile or a datasheet row. A device profile of
    another GPU, given or found beside the run, is not applied, and a note says so."""
    notes: list[str] = []
    found = [(given, "given with --device-profile")]
    if run_dir is not None:
        found += [(read_device_profile(folder / DEVICE_PROFILE), "device profile beside the run")
                  for folder in profile_folders(Path(run_dir)) if (folder / DEVICE_PROFILE).is_file()]
    for profile, where in found:
        if profile is None:
            continue
        if profile.gpu.name == gpu_name:
            if not profile.set_by:
                notes.append(PRE_PROBE_NOTE)
            return Ceilings.from_profile(profile, where), notes
        notes.append(f"the device profile {where} was measured on {profile.gpu.name}, this run on {gpu_name}: "
                     "not applied")
    spec = spec_for(gpu_name)
    if spec is None:
        return None, notes + (["no ceilings for this GPU (not in the datasheet table): no roofline"] if notes else [])
    profile = _bundled(spec.key)
    if profile is not None and profile.gpu.name == gpu_name and not profile.set_by:
        notes.append(PRE_PROBE_NOTE)
    return model_ceilings(spec.key, gpu_name), notes
