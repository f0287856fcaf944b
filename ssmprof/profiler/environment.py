"""The environment of a run, captured in one place: the host, the GPU and the software versions, as run.json
records them (`gpu`, `host`, `versions`, by `run_sections`) and `ssmprof doctor` shows them (`stack_report`).

A kernel's time depends on more than its code: the GPU and its clocks, the CPU that launches it (a step partly
bound by the host differs between hosts with one GPU) and the library versions that chose it. Capturing them
in one module keeps every writer of run.json (one process, a script's child, the ranks of a parallel run) and
the device profile recording the same keys, read the same way. NVML is read only through `profiler.nvml`, and
what a kernel library's install says of its source through `kernels`."""

from __future__ import annotations

import importlib
import os
import platform
import sys
from pathlib import Path

from ssmprof.errors import KernelUnavailable
from ssmprof.kernels import mamba_ssm, package_source, unbuilt_extensions
from ssmprof.profiler.nvml import gpu_clocks

# run.json `gpu.name` of a run on the CPU: the contract requires a name, and reports title a run by it
CPU_NAME = "cpu"
# The packages whose versions decide which kernels run, beside torch and its CUDA (run.json `versions`)
VERSIONED_PACKAGES = ("triton", "mamba_ssm", "causal_conv1d", "flash_attn", "tilelang", "fla")
# The kernel libraries a kernel author runs from a checkout or wheel of their own: where each came from is recorded
# beside its version (`<name>_source`, `kernels.package_source`), so that two runs of one version built from two
# commits differ in their provenance, and `compare` and the gate name the change.
SOURCE_RECORDED = {"mamba_ssm": "mamba-ssm", "causal_conv1d": "causal-conv1d"}


def imported_kernels() -> dict[str, str]:
    """The kernel libraries (`VERSIONED_PACKAGES` but Triton, which torch imports anyway) this process has imported,
    with their versions: run.json `provenance` of a --script run, which plans no kernels of its own, so that its
    header names the fused kernels its script used."""
    return {name: f"{getattr(sys.modules[name], '__version__', 'unknown')}, imported by the script"
            for name in VERSIONED_PACKAGES if name != "triton" and name in sys.modules}


def cpu_model() -> str:
    """The CPU's model name as Linux reports it (/proc/cpuinfo), or "" where it does not."""
    lines = (_kernel_text("/proc/cpuinfo") or "").splitlines()
    return next((line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")), "")


def host_info() -> dict:
    """run.json `host`: the CPU that launches the kernels, since a step partly bound by the host differs between
    hosts with one GPU; the model name from Linux, else Python's guess, else "unknown"."""
    model = cpu_model()
    return {"cpu": model or platform.processor() or "unknown", "cpu_count": os.cpu_count(),
            "hostname": platform.node(), "python": platform.python_version()}


def _cpu_list(cpus: set[int]) -> str:
    """{0, 1, 2, 3, 8} as "0-3,8", as Linux writes CPU lists."""
    ranges: list[list[int]] = []
    for cpu in sorted(cpus):
        if ranges and cpu == ranges[-1][1] + 1:
            ranges[-1][1] = cpu
        else:
            ranges.append([cpu, cpu])
    return ",".join(f"{low}-{high}" if high > low else str(low) for low, high in ranges)


def _parse_cpu_list(text: str) -> set[int]:
    cpus: set[int] = set()
    for part in text.strip().split(","):
        if part:
            low, _, high = part.partition("-")
            cpus.update(range(int(low), int(high or low) + 1))
    return cpus


def _kernel_text(path: str) -> str | None:
    """What Linux says under /proc or /sys (None where it does not): observing the host, no file handed on."""
    if not path.startswith(("/proc/", "/sys/")):
        raise ValueError(f"{path}: only Linux's /proc and /sys are read here")
    try:
        with open(path) as file:
            return file.read()
    except OSError:
        return None


def numa_nodes(cpus: set[int]) -> list[int]:
    """The NUMA nodes whose CPUs `cpus` include (Linux's /sys/devices/system/node); [] where not exposed."""
    nodes = []
    for node in sorted(Path("/sys/devices/system/node").glob("node[0-9]*"), key=lambda p: int(p.name[4:])):
        listed = _kernel_text(str(node / "cpulist"))
        if listed is not None and _parse_cpu_list(listed) & cpus:
            nodes.append(int(node.name[4:]))
    return nodes


def gpu_numa_node(pci_bus_id: str | None) -> int | None:
    """The NUMA node of the GPU at `pci_bus_id` as sysfs says (-1 there, or unreadable: None)."""
    text = _kernel_text(f"/sys/bus/pci/devices/{pci_bus_id.lower()}/numa_node") if pci_bus_id else None
    node = int(text) if text is not None and text.strip().lstrip("-").isdigit() else -1
    return node if node >= 0 else None


def process_counters() -> dict[str, int]:
    """This process's context switches (voluntary: it waited; involuntary: it was preempted), migrations between
    CPUs (summed over its threads, /proc/self/task/*/sched) and threads, as Linux counts them now; {} where /proc
    does not say."""
    status = _kernel_text("/proc/self/status") or ""
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    counts = {name: int(fields[key]) for name, key in (("voluntary_switches", "voluntary_ctxt_switches"),
                                                       ("involuntary_switches", "nonvoluntary_ctxt_switches"),
                                                       ("threads", "Threads")) if key in fields}
    migrations = 0
    for sched in Path("/proc/self/task").glob("*/sched"):
        for line in (_kernel_text(str(sched)) or "").splitlines():
            if line.startswith("se.nr_migrations"):
                migrations += int(line.split(":")[1])
    if counts:
        counts["migrations"] = migrations
    return counts


def process_placement(pci_bus_id: str | None) -> dict:
    """Where this process runs, beside where its GPU sits: the CPUs it may run on and their NUMA nodes, the GPU's
    NUMA node, the thread counts it was given (OMP_NUM_THREADS, MKL_NUM_THREADS, torch's intra-op threads). A
    rank whose CPUs lie on another node than its GPU, or whose threads oversubscribe its CPUs, launches slower."""
    import torch

    cpus = os.sched_getaffinity(0)
    return {"cpus": _cpu_list(cpus), "cpu_count": len(cpus), "cpu_numa_nodes": numa_nodes(cpus),
            "gpu_numa_node": gpu_numa_node(pci_bus_id), "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
            "mkl_num_threads": os.environ.get("MKL_NUM_THREADS"), "torch_threads": torch.get_num_threads()}


def gpu_properties(cuda: bool = True) -> dict:
    """The GPU this process computes on as torch reports it (run.json `gpu` less its clocks), taken by the process
    that trains (a script's child, each rank) since only it knows its device; {} for a run on the CPU (`cuda`
    False, even where a GPU is present) or where torch sees no GPU."""
    import torch

    if not cuda or not torch.cuda.is_available():
        return {}
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    return {
        "name": props.name,
        "sm_count": props.multi_processor_count,
        "memory_bytes": props.total_memory,
        "l2_bytes": getattr(props, "L2_cache_size", None),
        "compute_capability": f"{props.major}.{props.minor}",
    }


def run_gpu(properties: dict) -> dict:
    """run.json `gpu` (and a device profile's): the properties the training process found (`gpu_properties`; a
    run on the CPU is named `CPU_NAME`), with the clocks and driver as NVML finds them now (`nvml.gpu_clocks`)."""
    return {**(properties or {"name": CPU_NAME}), "clocks": gpu_clocks()}


def software_versions() -> dict[str, str | None]:
    """run.json `versions`: the stack that decides which kernels run (torch, its CUDA, `VERSIONED_PACKAGES`; None
    where not importable), and where a kernel library installed from a checkout, a git URL or a wheel file came
    from (`SOURCE_RECORDED`; no key for one installed from an index)."""
    import torch

    versions: dict[str, str | None] = {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
    }
    for name in VERSIONED_PACKAGES:
        try:
            module = mamba_ssm() if name == "mamba_ssm" else importlib.import_module(name)
            versions[name] = getattr(module, "__version__", "unknown")
        except (ImportError, KernelUnavailable):
            versions[name] = None
    for name, distribution in SOURCE_RECORDED.items():
        source = package_source(distribution) if versions.get(name) else None
        if source:
            versions[f"{name}_source"] = source
    return versions


def stack_report() -> dict[str, str | None]:
    """`software_versions()` for people (`ssmprof doctor`): a package that is installed but cannot be imported
    only because its CUDA extension is not built says so (`kernels.unbuilt_extensions`), instead of "not
    installed" (None); run.json keeps None, the version a run could not use."""
    report = software_versions()
    for name, note in unbuilt_extensions().items():
        if report.get(name) is None:
            report[name] = note
    return report


def run_sections(properties: dict) -> dict[str, dict]:
    """run.json's environment: `gpu` (`run_gpu` of the training process's `properties`), and `host` and
    `versions` as this process finds them: the one that writes the run (node 0's of a parallel run)."""
    return {"gpu": run_gpu(properties), "host": host_info(), "versions": software_versions()}
