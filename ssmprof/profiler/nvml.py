"""NVML, read only, and always on the GPU this process computes on.

Every NVML call goes through `device_handle`, which finds the NVML device of `torch.cuda.current_device()`:
by its UUID where torch gives one, else by its PCI bus id, else through CUDA_VISIBLE_DEVICES (CUDA's device
`i` is the `i`-th entry of that list, an NVML index or a UUID). NVML numbers every GPU of the host, CUDA only
the visible ones, so NVML's device 0 is another GPU as soon as a job is given any GPU but the first.

Two readings: the clocks as found (`gpu_clocks`, run.json `gpu.clocks`, recorded by `profiler.environment`: an
idle reading), and, while the timed steps ran (`SharingMonitor`, run.json `gpu_sharing`), the SM clock and whether
other processes used the GPU: a second process on the GPU slows every kernel, and the regression gate names it as
the cause instead of the kernels.
"""

from __future__ import annotations

import os
import statistics
import threading
from dataclasses import dataclass, field

# Seconds between two samples of the GPU's processes and utilization while the timed steps run: a few samples
# per step of the small presets, cheap enough (one NVML query each) not to disturb the host
SAMPLE_INTERVAL_S = 0.05


@dataclass(frozen=True)
class CudaDevice:
    """What identifies the GPU CUDA calls `index` to NVML (None where torch does not tell)."""

    index: int
    uuid: str | None = None  # "GPU-..." as NVML spells it
    pci_bus_id: str | None = None  # "0000:65:00.0"


def current_device() -> CudaDevice:
    """The GPU this process computes on, as torch knows it."""
    import torch

    index = torch.cuda.current_device()
    props = torch.cuda.get_device_properties(index)
    uuid = getattr(props, "uuid", None)
    uuid = None if uuid is None else (str(uuid) if str(uuid).startswith(("GPU-", "MIG-")) else f"GPU-{uuid}")
    bus = None
    bus_id = getattr(props, "pci_bus_id", None)  # not in every torch
    if bus_id is not None:
        domain, slot = getattr(props, "pci_domain_id", 0), getattr(props, "pci_device_id", 0)
        bus = f"{domain:04x}:{bus_id:02x}:{slot:02x}.0"
    return CudaDevice(index, uuid, bus)


def visible_entry(index: int, visible: str | None) -> str:
    """The CUDA_VISIBLE_DEVICES entry of CUDA device `index` (the index itself where the variable is unset)."""
    if not visible:
        return str(index)
    entries = [entry.strip() for entry in visible.split(",") if entry.strip()]
    if index >= len(entries):
        raise IndexError(f"CUDA device {index} is not in CUDA_VISIBLE_DEVICES={visible}")
    return entries[index]


def device_handle(nvml, device: CudaDevice, visible: str | None = None):
    """The NVML handle of `device`; `nvml`: the pynvml module (or a stand-in with its functions)."""
    if device.uuid:
        return nvml.nvmlDeviceGetHandleByUUID(device.uuid)
    if device.pci_bus_id:
        return nvml.nvmlDeviceGetHandleByPciBusId(device.pci_bus_id)
    entry = visible_entry(device.index, os.environ.get("CUDA_VISIBLE_DEVICES") if visible is None else visible)
    if entry.isdigit():
        return nvml.nvmlDeviceGetHandleByIndex(int(entry))
    return nvml.nvmlDeviceGetHandleByUUID(entry)


def _nvml():
    """pynvml, initialized; None where nvidia-ml-py or the driver is missing."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # ImportError, or NVMLError without a driver: the readings are then "not recorded"
        return None
    return pynvml


def gpu_clocks() -> dict:
    """SM and memory clocks of this process's GPU as found (MHz), and the driver; never changed."""
    nvml = _nvml()
    if nvml is None:
        return {"note": "NVML unavailable (nvidia-ml-py or the driver missing)"}
    try:
        handle = device_handle(nvml, current_device())
        return {
            "sm_mhz": nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM),
            "sm_max_mhz": nvml.nvmlDeviceGetMaxClockInfo(handle, nvml.NVML_CLOCK_SM),
            "memory_mhz": nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_MEM),
            "memory_max_mhz": nvml.nvmlDeviceGetMaxClockInfo(handle, nvml.NVML_CLOCK_MEM),
            "driver": nvml.nvmlSystemGetDriverVersion(),
        }
    except nvml.NVMLError as exc:
        return {"note": f"NVML: {exc}"}


def other_processes(nvml, handle, own_pid: int) -> set[int]:
    """PIDs of the processes other than this one holding a compute or graphics context on the GPU. In a
    container NVML reports the host's PIDs, where this process's own is unknown: then every process but one
    (this one) counts as another, by dropping the smallest PID so the count is right."""
    pids = {p.pid for query in (nvml.nvmlDeviceGetComputeRunningProcesses, nvml.nvmlDeviceGetGraphicsRunningProcesses)
            for p in query(handle)}
    if own_pid in pids:
        return pids - {own_pid}
    return set(sorted(pids)[1:])


@dataclass
class SharingMonitor:
    """Samples, every `interval_s` while entered, the other processes on this process's GPU and its
    utilization (SM %, memory %); `summary()` is run.json's `gpu_sharing`."""

    interval_s: float = SAMPLE_INTERVAL_S
    samples: list[tuple[int, int, int]] = field(default_factory=list)  # (other processes, SM %, memory %)
    sm_clocks_mhz: list[int] = field(default_factory=list)  # the SM clock at each sample
    other_pids: set[int] = field(default_factory=set)
    note: str | None = None

    def __enter__(self) -> SharingMonitor:
        self._stop = threading.Event()
        self._thread = None
        nvml = _nvml()
        if nvml is None:
            self.note = "NVML unavailable (nvidia-ml-py or the driver missing)"
            return self
        try:
            handle = device_handle(nvml, current_device())
        except Exception as exc:  # NVMLError or an unmapped device: sharing then not recorded
            self.note = f"NVML: {exc}"
            return self
        self._thread = threading.Thread(target=self._sample, args=(nvml, handle), daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _sample(self, nvml, handle) -> None:
        own = os.getpid()
        while True:
            try:
                others = other_processes(nvml, handle, own)
                rates = nvml.nvmlDeviceGetUtilizationRates(handle)
                clock = nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM)
            except nvml.NVMLError as exc:
                self.note = f"NVML: {exc}"
                return
            self.other_pids |= others
            self.samples.append((len(others), int(rates.gpu), int(rates.memory)))
            self.sm_clocks_mhz.append(int(clock))
            if self._stop.wait(self.interval_s):
                return

    def summary(self) -> dict:
        return {**sharing_summary(self.samples, self.other_pids, self.note), **clock_summary(self.sm_clocks_mhz)}


def clock_summary(sm_clocks_mhz: list[int]) -> dict:
    """run.json `gpu_sharing.sm_clock_mhz`: median, min and max of the SM clock sampled while the timed steps ran
    (the clock as found before them is an idle reading); nothing where no sample was taken."""
    if not sm_clocks_mhz:
        return {}
    return {"sm_clock_mhz": {"median": statistics.median(sm_clocks_mhz), "min": min(sm_clocks_mhz),
                             "max": max(sm_clocks_mhz), "samples": len(sm_clocks_mhz)}}


def sharing_summary(samples: list[tuple[int, int, int]], other_pids: set[int], note: str | None = None) -> dict:
    """run.json `gpu_sharing`: `shared` (another process held the GPU in any sample; None: not recorded), the
    samples, the share of them with another process, the most other processes at once, their PIDs, and the
    median SM and memory utilization."""
    if not samples:
        return {"shared": None, "samples": 0, "note": note or "no sample taken"}
    with_others = [s for s in samples if s[0] > 0]
    return {"shared": bool(with_others), "samples": len(samples),
            "shared_sample_fraction": len(with_others) / len(samples),
            "max_other_processes": max(s[0] for s in samples), "other_pids": sorted(other_pids),
            "sm_utilization_pct": statistics.median(s[1] for s in samples),
            "memory_utilization_pct": statistics.median(s[2] for s in samples), "note": note}
