"""NVML on the GPU this process computes on, never NVML's device 0 by default; the shared-GPU summary."""

import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from ssmprof.profiler import nvml

ROOT = Path(__file__).parent.parent / "ssmprof"


class FakeNvml:
    """Records which lookup named which GPU."""

    def __init__(self, processes=()):
        self.calls = []
        self.processes = [SimpleNamespace(pid=pid) for pid in processes]

    def nvmlDeviceGetHandleByUUID(self, uuid):
        self.calls.append(("uuid", uuid))
        return uuid

    def nvmlDeviceGetHandleByPciBusId(self, bus):
        self.calls.append(("bus", bus))
        return bus

    def nvmlDeviceGetHandleByIndex(self, index):
        self.calls.append(("index", index))
        return index

    def nvmlDeviceGetComputeRunningProcesses(self, handle):
        return self.processes

    def nvmlDeviceGetGraphicsRunningProcesses(self, handle):
        return []


@pytest.mark.parametrize("device, visible, call", [
    (nvml.CudaDevice(0, uuid="GPU-abc"), "3", ("uuid", "GPU-abc")),
    (nvml.CudaDevice(1, pci_bus_id="0000:65:00.0"), "2,5", ("bus", "0000:65:00.0")),
    (nvml.CudaDevice(0), "3", ("index", 3)),  # CUDA's device 0 is NVML's device 3
    (nvml.CudaDevice(1), "2,5", ("index", 5)),
    (nvml.CudaDevice(0), "GPU-def,GPU-abc", ("uuid", "GPU-def")),
    (nvml.CudaDevice(2), "", ("index", 2)),  # nothing hidden: CUDA's numbering
])
def test_the_handle_is_of_the_gpu_cuda_uses(device, visible, call):
    fake = FakeNvml()
    assert nvml.device_handle(fake, device, visible) == call[1]
    assert fake.calls == [call]


def test_no_nvml_call_names_device_0_and_pynvml_lives_in_one_module():
    for path in ROOT.rglob("*.py"):
        text = path.read_text()
        assert not re.search(r"GetHandleByIndex\(\s*0\s*\)", text), path
        if path.name != "nvml.py":
            assert "pynvml" not in text, f"{path}: NVML is read through profiler/nvml.py"


def test_other_processes_on_the_gpu():
    assert nvml.other_processes(FakeNvml([10, 42]), None, own_pid=42) == {10}
    assert nvml.other_processes(FakeNvml([42]), None, own_pid=42) == set()
    # in a container NVML reports the host's PIDs: all but one count as others
    assert len(nvml.other_processes(FakeNvml([900, 901]), None, own_pid=42)) == 1
    assert nvml.other_processes(FakeNvml([900]), None, own_pid=42) == set()


def test_sharing_summary():
    alone = nvml.sharing_summary([(0, 90, 40)] * 5, set())
    assert alone["shared"] is False and alone["samples"] == 5 and alone["sm_utilization_pct"] == 90
    beside = nvml.sharing_summary([(0, 90, 40), (1, 100, 60), (1, 100, 60)], {77})
    assert beside["shared"] is True and beside["other_pids"] == [77]
    assert beside["shared_sample_fraction"] == pytest.approx(2 / 3)
    assert nvml.sharing_summary([], set(), "NVML unavailable")["shared"] is None


def test_without_a_gpu_the_monitor_records_nothing():
    with nvml.SharingMonitor(interval_s=0.01) as monitor:
        pass
    assert monitor.summary()["shared"] is None


def test_gpu_sharing_goes_through_the_contract(tmp_path):
    from ssmprof import schema

    source = schema.read_run(Path(__file__).parent / "data" / "regress-reruns-h100" / "rerun-1")
    sharing = nvml.sharing_summary([(1, 100, 60)] * 3, {77})
    info = {**source.info.model_dump(), "gpu_sharing": sharing}
    run = schema.read_run(schema.write_run(tmp_path / "run", schema.new_run_info(info), source.kernels))
    assert run.info.gpu_sharing.shared is True
    with pytest.raises(schema.SchemaError, match="gpu_sharing"):
        schema.check_info({**source.info.model_dump(), "gpu_sharing": {"shared": "maybe", "samples": 3}})


class ClockedNvml(FakeNvml):
    """A GPU whose SM clock reads from `clocks`, one value a sample, then stops the sampler (as a driver error)."""

    NVML_CLOCK_SM = 0

    class NVMLError(Exception):
        pass

    def __init__(self, clocks):
        super().__init__()
        self.clocks = list(clocks)

    def nvmlDeviceGetUtilizationRates(self, handle):
        return SimpleNamespace(gpu=90, memory=30)

    def nvmlDeviceGetClockInfo(self, handle, which):
        if not self.clocks:
            raise self.NVMLError("done")
        return self.clocks.pop(0)


def test_the_sm_clock_is_sampled_during_the_steps():
    """The monitor's samples give run.json `gpu_sharing.sm_clock_mhz` (median, min, max), not the idle clock."""
    monitor = nvml.SharingMonitor(interval_s=0.0)
    monitor._stop = SimpleNamespace(wait=lambda _: False)
    monitor._sample(ClockedNvml([1980, 1755, 1980]), "GPU-abc")
    summary = monitor.summary()
    assert summary["sm_clock_mhz"] == {"median": 1980, "min": 1755, "max": 1980, "samples": 3}
    assert nvml.clock_summary([]) == {}


@pytest.mark.parametrize(("sharing", "header"), [
    (None, "SM clock not measured during the steps"),
    ({"shared": False, "samples": 3, "sm_clock_mhz": {"median": 1980, "min": 1755, "max": 1980, "samples": 3}},
     "SM clock 1980 MHz during the steps (1755-1980)")])
def test_the_header_shows_the_clock_of_the_steps(sharing, header):
    from ssmprof.analysis.findings.run import provenance
    from ssmprof.schema import read_run

    run = read_run(Path(__file__).parent / "data" / "tp4-h100-mamba2-lm-paper-straggler")
    info = run.info.model_copy(update={"gpu_sharing": None if sharing is None else
                                       run.info.gpu_sharing.model_validate(sharing)})
    gpu = provenance(info, "test").set_index("item").loc["GPU", "value"]
    assert header in gpu and "465" not in gpu
