"""`ssmprof sweep` and its regime map on the CPU: the grid and its validation, a real tiny sweep end to end
(the harness trains each point's model; one point fails in its data path and the sweep goes on), resume, the
report of a sweep folder, and `focus` counters' kernel choice on a real GPU run."""

import contextlib
import json
from pathlib import Path

import pandas as pd
import pytest
import torch
from typer.testing import CliRunner

from ssmprof import bundled, schema
from ssmprof.cli import app
from ssmprof.errors import InvalidConfig, NoGpu, UnknownWorkload
from ssmprof.pipeline import measure, regimes, reporting
from ssmprof.pipeline import sweep as sweeping
from ssmprof.profiler import profile_run
from ssmprof.profiler.counters import FOCUS_TOP, SamplingPlan, focus_kernels
from ssmprof.profiler.harness import run_training
from ssmprof.profiler.ncu_argv import ncu_argv

DATA = Path(__file__).parent / "data"


def spec(*vary, workloads=("mamba2-lm",), sets=()):
    return sweeping.SweepSpec(list(workloads), "tiny", list(vary), list(sets), "none", 1, 0)


@pytest.mark.parametrize(
    ("scenario", "vary", "sets", "workloads", "error", "message"),
    [
        ("no values", ["seq_len="], [], ["mamba2-lm"], InvalidConfig, "--vary expects NAME=V1,V2"),
        ("no =", ["seq_len"], [], ["mamba2-lm"], InvalidConfig, "--vary expects NAME=V1,V2"),
        ("axis twice", ["seq_len=32", "seq_len=64"], [], ["mamba2-lm"], InvalidConfig, "names 'seq_len' twice"),
        ("unknown setting", ["d_sate=16"], [], ["mamba2-lm"], InvalidConfig,
         "sweep point mamba2-lm d_sate=16: mamba2-lm has no setting 'd_sate'"),
        ("bad value, the last one", ["chunk_size=16,24"], [], ["mamba2-lm"], InvalidConfig,
         "chunk_size=24: chunk_size must be a power of two"),
        ("a setting one workload lacks", ["d_state=16"], [], ["mamba2-lm", "transformer"], InvalidConfig,
         "transformer has no setting 'd_state'"),
        ("varied and fixed", ["seq_len=32"], ["seq_len=64"], ["mamba2-lm"], InvalidConfig,
         "seq_len is both varied"),
        ("a value twice", ["seq_len=32,032"], [], ["mamba2-lm"], InvalidConfig, "repeats an earlier point"),
        ("unknown workload", ["seq_len=32"], [], ["mamba9"], UnknownWorkload, "unknown workload 'mamba9'"),
    ],
)
def test_the_whole_grid_is_validated_before_anything_runs(scenario, vary, sets, workloads, error, message):
    with pytest.raises(error, match=message):
        sweeping.plan(spec(*vary, workloads=workloads, sets=sets), "cpu")


def test_grid_runs_workload_by_workload_with_the_last_axis_fastest_and_typed_values():
    axes, planned = sweeping.plan(spec("d_state=8,16", "chunk_size=16,32", workloads=("mamba2-lm", "hybrid")), "cpu")
    assert axes == {"d_state": [8, 16], "chunk_size": [16, 32]}
    assert [(p.point.workload, p.point.settings["d_state"], p.point.settings["chunk_size"]) for p in planned][:5] == [
        ("mamba2-lm", 8, 16), ("mamba2-lm", 8, 32), ("mamba2-lm", 16, 16), ("mamba2-lm", 16, 32), ("hybrid", 8, 16)]
    assert sweeping.run_name(planned[1].point) == "mamba2-lm_d_state-8_chunk_size-32"
    assert planned[1].options.sets == ["d_state=8", "chunk_size=32"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU path")
def test_sweep_needs_a_gpu_and_checks_its_options_first(tmp_path):
    with pytest.raises(InvalidConfig, match="--vary expects"):
        sweeping.sweep(sweeping.SweepRequest(spec("seq_len"), tmp_path / "s"))
    with pytest.raises(NoGpu, match="no CUDA GPU is visible"):
        sweeping.sweep(sweeping.SweepRequest(spec("seq_len=32"), tmp_path / "s"))
    assert list(tmp_path.iterdir()) == []


def cpu_profile(request, progress=None):
    """`measure.profile` on the CPU: the real harness trains the point's model (so a point fails as it would on
    the GPU); the CPU launches no CUDA kernels, so the run directory takes the kernel table, GPU and collector
    sections of the bundled H100 run of the same workload."""
    options, settings = request.workload, request.settings
    ready = measure.prepare(options, "cpu")
    result = run_training(ready.workload, ready.preset, ready.cfg, ready.plan, settings.steps, ready.warmup,
                          progress=progress)
    reference = schema.read_run(bundled.REFERENCE / "h100-sxm" / options.workload)
    recorded = reference.info.model_dump(exclude_unset=True)
    result.gpu = {key: value for key, value in recorded["gpu"].items() if key != "clocks"}
    info = profile_run.run_info(result, ready.overrides, recorded["collectors"], reference.kernels, {},
                            checks=recorded.get("checks", {}))
    return schema.write_run(settings.out / settings.name, info, reference.kernels)


@pytest.fixture
def on_cpu(monkeypatch):
    """The sweep pipeline as on a GPU host, each point profiled by `cpu_profile`."""
    monkeypatch.setattr(sweeping, "resolve_device", lambda device: "cuda")
    monkeypatch.setattr(measure, "resolve_device", lambda device: "cpu")
    monkeypatch.setattr(measure, "profile", cpu_profile)


def occupy(out: Path, *names: str) -> None:
    """Leave a stale directory where these points' run directories go: writing them fails after training."""
    for name in names:
        (out / name).mkdir(parents=True)
        (out / name / "notes.txt").write_text("an earlier experiment")


def test_a_tiny_sweep_end_to_end_a_failed_point_recorded_and_the_sweep_going_on(tmp_path, on_cpu):
    out = tmp_path / "sweep"
    occupy(out, "mamba2-lm_seq_len-128", "transformer_seq_len-128")
    seen = []

    @contextlib.contextmanager
    def progress_for(index, total, point):
        yield None
        seen.append((index, total, point.status))

    sweep_spec = sweeping.SweepSpec(["mamba2-lm", "transformer"], "tiny", ["seq_len=32,128,64"], [], "none", 1, 0)
    result = sweeping.sweep(sweeping.SweepRequest(sweep_spec, out), progress_for)
    manifest = schema.read_document(schema.SweepManifest, out / schema.SWEEP_MANIFEST)
    assert manifest == result.manifest and manifest.axes == {"seq_len": [32, 128, 64]}
    statuses = [(p.workload, p.settings["seq_len"], p.status.split(":")[0]) for p in manifest.points]
    assert statuses == [("mamba2-lm", 32, "complete"), ("mamba2-lm", 128, "failed"), ("mamba2-lm", 64, "complete"),
                        ("transformer", 32, "complete"), ("transformer", 128, "failed"),
                        ("transformer", 64, "complete")]
    failed = manifest.points[1]
    assert failed.status.startswith("failed: SsmprofError: ") and "exists already" in failed.status
    assert failed.run is None and failed.wall_s > 0
    assert [s[:2] for s in seen] == [(i, 6) for i in range(1, 7)]
    complete = [p for p in manifest.points if p.complete]
    assert all((out / p.run / "run.json").is_file() and p.wall_s > 0 for p in complete)
    assert json.loads((out / "mamba2-lm_seq_len-64" / "run.json").read_text())["workload"]["config"]["seq_len"] == 64
    # the regime map
    page = result.report.read_text()
    assert "ssmprof sweep" in page and "Crossover" in page and "2 point(s) failed" in page
    per_item = pd.read_csv(out / "sweep-csv" / "sweep-per_item.csv")
    assert sorted(zip(per_item["workload"], per_item["seq_len"], strict=True)) == [
        ("mamba2-lm", 32), ("mamba2-lm", 64), ("transformer", 32), ("transformer", 64)]
    crossover = pd.read_csv(out / "sweep-csv" / "sweep-crossover.csv")
    assert crossover[["workload_a", "workload_b", "points"]].values.tolist() == [["mamba2-lm", "transformer", 2]]
    # `ssmprof report` on the sweep folder renders the same map, markdown too
    markdown = reporting.report([out], "md")
    assert markdown.startswith("# ssmprof sweep: mamba2-lm, transformer --preset tiny over seq_len")
    assert "failed: SsmprofError" in markdown


def raising(error: BaseException, at_seq_len: int):
    """`cpu_profile`, raising `error` at one sequence length (what the GPU raises there: an OOM, a fault)."""
    def profile(request, progress=None):
        if f"seq_len={at_seq_len}" in request.workload.sets:
            raise error
        return cpu_profile(request, progress)
    return profile


@pytest.mark.parametrize(
    ("scenario", "error", "statuses"),
    [
        ("out of memory, from torch", torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"),
         ["complete", "failed: OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", "complete"]),
        ("a kernel fault: the CUDA context is lost, the points left are not run",
         RuntimeError("CUDA error: an illegal memory access was encountered"),
         ["complete", "failed: GpuKernelFault: CUDA error: an illegal memory access was encountered",
          "failed: not run: the CUDA context was lost at mamba2-lm seq_len=64 (a kernel fault); --resume in a new "
          "process runs it"]),
    ],
)
def test_gpu_failures_are_recorded(tmp_path, on_cpu, monkeypatch, scenario, error, statuses):
    monkeypatch.setattr(measure, "profile", raising(error, 64))
    result = sweeping.sweep(sweeping.SweepRequest(spec("seq_len=32,64,16"), tmp_path / "s", report=False))
    assert [p.status for p in result.manifest.points] == statuses, scenario


def test_a_bug_is_not_swallowed(tmp_path, on_cpu, monkeypatch):
    monkeypatch.setattr(measure, "profile", raising(KeyError("a bug"), 64))
    with pytest.raises(KeyError):
        sweeping.sweep(sweeping.SweepRequest(spec("seq_len=32,64"), tmp_path / "s", report=False))
    manifest = schema.read_document(schema.SweepManifest, tmp_path / "s" / schema.SWEEP_MANIFEST)
    assert [p.status for p in manifest.points] == ["complete", "pending"]  # readable after the crash


def test_resume_runs_only_the_points_not_complete_and_refuses_another_sweep(tmp_path, on_cpu):
    out = tmp_path / "sweep"
    occupy(out, "mamba2-lm_seq_len-64")
    first = sweeping.sweep(sweeping.SweepRequest(spec("seq_len=32,64"), out, report=False))
    assert [p.status.split(":")[0] for p in first.manifest.points] == ["complete", "failed"]
    with pytest.raises(InvalidConfig, match="holds a sweep already: --resume"):
        sweeping.sweep(sweeping.SweepRequest(spec("seq_len=32,64"), out))
    with pytest.raises(InvalidConfig, match="differs from this one in axes"):
        sweeping.sweep(sweeping.SweepRequest(spec("seq_len=32,16"), out, resume=True))
    (out / "mamba2-lm_seq_len-64" / "notes.txt").unlink()
    (out / "mamba2-lm_seq_len-64").rmdir()
    ran = []
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(measure, "profile", lambda request, progress=None: ran.append(request.workload.sets) or
                      cpu_profile(request, progress))
        resumed = sweeping.sweep(sweeping.SweepRequest(spec("seq_len=32,64"), out, resume=True, report=False))
    assert ran == [["seq_len=64"]]  # the complete point is not run again
    assert [p.run for p in resumed.manifest.points] == ["mamba2-lm_seq_len-32", "mamba2-lm_seq_len-64"]
    assert not resumed.failed


def test_the_sweep_cli_prints_each_point_and_the_summary(tmp_path, on_cpu):
    out = tmp_path / "sweep"
    occupy(out, "mamba2-lm_seq_len-128")
    result = CliRunner().invoke(app, ["sweep", "mamba2-lm", "--preset", "tiny", "--vary", "seq_len=32,128",
                                      "--counters", "none", "--steps", "1", "--warmup", "0", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "[1/2] mamba2-lm seq_len=32: complete" in result.output
    assert "[2/2] mamba2-lm seq_len=128: failed: SsmprofError" in result.output
    assert "sweep of 2 points" in result.output and "1 complete, 1 failed" in result.output
    assert (out / regimes.SWEEP_REPORT).is_file()
    bad = CliRunner().invoke(app, ["sweep", "mamba2-lm", "--preset", "tiny", "--vary", "d_sate=16", "--out",
                                   str(tmp_path / "other")])
    assert bad.exit_code == 1 and "has no setting 'd_sate'" in bad.output and "Traceback" not in bad.output


def test_focus_counters_measure_the_ssm_kernels_and_the_longest_others_of_a_real_run(tmp_path):
    kernels = schema.read_run(DATA / "mamba2-lm-small-h100").kernels
    names = focus_kernels(kernels)
    ssd = {n for n in kernels["kernel_name"] if any(s in n for s in ("chunk_scan", "chunk_state", "state_passing",
                                                                    "bmm_chunk", "chunk_cumsum"))}
    assert ssd and ssd <= set(names)
    others = kernels[~kernels["kernel_name"].isin(ssd | {n for n in names if "causal_conv1d" in n})]
    longest = others.groupby("kernel_name")["duration_ns"].sum().nlargest(FOCUS_TOP).index
    assert set(longest) <= set(names) and len(set(names) - ssd) <= FOCUS_TOP + 2
    plan = SamplingPlan.of(kernels)
    expected = plan.expected(kernels, "sampled", names=names)
    assert set(kernels.loc[expected, "kernel_name"]) == set(names)
    assert len(expected) < len(plan.expected(kernels, "sampled"))
    argv = ncu_argv(["python"], tmp_path / "r", "sampled", names=names)
    pattern = argv[argv.index("--kernel-name") + 1]
    assert pattern.startswith("regex:^(") and all(name in pattern for name in names)
    assert argv[argv.index("--filter-mode") + 1] == "per-launch-config"


def test_a_folder_that_is_not_a_sweep_is_reported_as_runs():
    assert not regimes.is_sweep(DATA / "mamba2-lm-small-h100")


def test_bundled_sweeps_put_their_headlines_into_the_results(tmp_path, on_cpu, monkeypatch):
    reference = tmp_path / "reference"
    sweeping.sweep(sweeping.SweepRequest(spec("seq_len=32,64", workloads=("mamba2-lm", "transformer")),
                                         reference / "h100-sxm" / bundled.SWEEPS / "seq_len", report=False))
    monkeypatch.setattr(bundled, "REFERENCE", reference)
    assert bundled.sweeps("h100-sxm") == [reference / "h100-sxm" / bundled.SWEEPS / "seq_len"] and not \
        bundled.sweeps("h200")
    text = reporting.sweep_headlines()
    assert "**Sweep on the H100**: mamba2-lm, transformer --preset tiny over seq_len 32..64" in text
    assert "- " in text and "per token" in text


@pytest.mark.gpu
def test_a_real_sweep_pays_autotuning_once_per_key(tmp_path):
    """On the GPU: two sequence lengths share the SSD kernels' autotuning keys, so the second point's warm-up
    skips the autotuning the first one paid (harness.seconds.warmup)."""
    sweep_spec = sweeping.SweepSpec(["mamba2-lm"], "small", ["seq_len=1024,2048"], [], "none", 3)
    result = sweeping.sweep(sweeping.SweepRequest(sweep_spec, tmp_path / "s"))
    first, second = (json.loads((tmp_path / "s" / p.run / "run.json").read_text()) for p in result.manifest.points)
    assert second["harness"]["seconds"]["warmup"] < first["harness"]["seconds"]["warmup"]
    assert result.report.is_file() and not result.failed
