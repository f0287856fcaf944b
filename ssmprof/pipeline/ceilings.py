"""Which ceilings a run's roofline uses, decided in one place: those measured by `ssmprof calibrate` on the
run's own GPU where a device profile of it is given, else its GPU's datasheet row, else none (no roofline).

A device profile from another GPU is never applied: its ceilings would put every kernel of the run on the
wrong roof without any sign of it in the report, so the run falls back to the datasheet and says so.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from ssmprof.analysis.checks import Peaks, check_counters
from ssmprof.analysis.roofline import Ceilings, at_least_achieved
from ssmprof.profiler.gpu_specs import spec_for
from ssmprof.schema import DeviceProfile, RunInfo, read_document


def read_device_profile(path: Path | None) -> DeviceProfile | None:
    return read_document(DeviceProfile, path) if path is not None else None


def datasheet_ceilings(info: RunInfo) -> Ceilings | None:
    """The datasheet ceilings of the run's GPU, or None for a GPU not in the table."""
    spec = spec_for(info.gpu.name)
    return Ceilings.from_datasheet(spec) if spec else None


def ceilings_for(info: RunInfo, profile: DeviceProfile | None = None,
                 kernels: pd.DataFrame | None = None) -> tuple[Ceilings | None, list[str]]:
    """(ceilings, warnings) for the run of `info`: the profile's where it was measured on the run's GPU,
    else the datasheet's (with a warning where a profile of another GPU was given); with the run's analysis
    frame `kernels`, raised to what its launches reach (`roofline.at_least_achieved`, with a note each)."""
    gpu = info.gpu.name
    notes = []
    if profile is not None and profile.gpu.name == gpu:
        ceilings = Ceilings.from_profile(profile.measured.model_dump())
    else:
        ceilings = datasheet_ceilings(info)
        if profile is not None:
            fallback = ("the datasheet ceilings" if ceilings else
                        "no ceilings (GPU not in the datasheet table): no roofline")
            notes.append(f"the device profile was measured on {profile.gpu.name}, this run on {gpu}: using {fallback}")
    if ceilings is not None and kernels is not None:
        ceilings, raised = at_least_achieved(ceilings, kernels)
        notes += raised
    return ceilings, notes


def ceilings_by_run(runs: dict, profile: DeviceProfile | None = None) -> dict[str, tuple[Ceilings | None, list[str]]]:
    """`ceilings_for` of each run (label -> loaded run), raised to what any run of the same GPU reaches: one
    GPU has one set of ceilings in a report, and a run whose counters are unchecked (schema 1) gets the
    ceilings its checked neighbours showed the calibrated ones to be too low."""
    pooled: dict[str, list[pd.DataFrame]] = {}
    for run in runs.values():
        pooled.setdefault(run.info.gpu.name, []).append(run.kernels)
    return {label: ceilings_for(run.info, profile, pd.concat(pooled[run.info.gpu.name], ignore_index=True))
            for label, run in runs.items()}


def datasheet_peaks(gpu_name: str) -> Peaks | None:
    """Datasheet peaks for the counter self-checks (None for a GPU not in the table: rates go unchecked)."""
    spec = spec_for(gpu_name)
    if spec is None:
        return None
    return Peaks(dram_bytes=spec.dram_tb_s * 1e12, bf16_flops=spec.bf16_tflops * 1e12,
                 tf32_flops=spec.tf32_tflops * 1e12, fp32_flops=spec.fp32_tflops * 1e12)


def check_run_counters(kernels: pd.DataFrame, gpu_name: str) -> tuple[pd.DataFrame, dict]:
    """`analysis.checks.check_counters` on the datasheet peaks of the run's GPU (`profile_run`'s `check`)."""
    return check_counters(kernels, datasheet_peaks(gpu_name))
