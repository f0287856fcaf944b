"""The pipeline layer called directly (no CLI): the bundled reference runs and the fixtures of tests/data, on
the CPU. The CLI tests check the same commands end to end; these pin what each function returns."""

import contextlib
import json
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import pandas as pd
import pytest
import torch

from ssmprof import bundled, schema
from ssmprof.errors import CorruptFile, InvalidConfig, NoGpu
from ssmprof.hardware import read_device_profile, run_ceilings
from ssmprof.pipeline import gate, measure, reporting
from ssmprof.pipeline.loading import load_run
from ssmprof.reports.render import RESULTS_END, RESULTS_START

DATA = Path(__file__).parent / "data"
H100_RUN = DATA / "mamba2-lm-small-h100"
MEASURED = "measured by ssmprof calibrate"


def h100_profile():
    return read_device_profile(bundled.device_profile("h100-sxm"))


def test_report_of_runs_from_two_gpus_uses_each_ones_ceilings():
    """One H100 profile given for an H100 and an H200 run: the given profile for the first; for the second, the
    H200 profile beside it (and a note that the given one was not applied)."""
    analyzed, overview = reporting.analyze_runs([bundled.runs("h100-sxm")[0], bundled.runs("h200")[0]],
                                                h100_profile())
    (info_a, summary_a, notes_a), (info_b, summary_b, notes_b) = analyzed
    assert set(summary_a.frames()["roofline"]["ceiling_source"]) == {f"{MEASURED}, given with --device-profile"}
    assert set(summary_b.frames()["roofline"]["ceiling_source"]) == {f"{MEASURED}, device profile beside the run"}
    assert not any("device profile" in note for note in notes_a)
    assert any("measured on NVIDIA H100 80GB HBM3, this run on NVIDIA H200" in note for note in notes_b)
    assert list(overview.step_times["workload"]) == ["mamba2-lm", "mamba2-lm (NVIDIA H200, #1)"]


def test_report_markdown_and_csv(tmp_path):
    out = tmp_path / "report.md"
    text = reporting.report([H100_RUN], "md", out, csv=tmp_path / "csv")
    assert out.read_text() == text and "## mamba2-lm --preset small on NVIDIA H100 80GB HBM3" in text
    assert {"breakdown.csv", "roofline.csv", "tensor_vector.csv"} <= {p.name for p in (tmp_path / "csv").iterdir()}
    with pytest.raises(InvalidConfig, match="--format must be html or md"):
        reporting.report([H100_RUN], "pdf")


def test_report_refuses_a_bad_device_profile_in_one_line(tmp_path):
    old = tmp_path / "old.json"
    old.write_text(json.dumps({**json.loads(bundled.device_profile("h100-sxm").read_text()), "version": 0}))
    with pytest.raises(CorruptFile, match=r"has version 0, this ssmprof reads 1"):
        reporting.report([H100_RUN], "md", device_profile=old)


def test_compare_and_rooflines_of_the_bundled_pair(tmp_path):
    a, b = bundled.runs("h100-sxm")[0], bundled.runs("h200")[0]
    text = reporting.compare(a, b, "md")
    assert "GPUs: NVIDIA H100 80GB HBM3 vs NVIDIA H200" in text and "## By category" in text
    roofs = reporting.rooflines(load_run(a), load_run(b))
    assert [set(roof["ceiling_source"]) for roof in roofs] == [{f"{MEASURED}, device profile beside the run"}] * 2
    html = reporting.compare(a, b, "html", tmp_path / "c.html")
    assert (tmp_path / "c.html").read_text() == html and "each on its own GPU's ceilings" in html


def test_project_and_its_check():
    text = reporting.project(H100_RUN, "h200", check=bundled.runs("h200")[0])
    assert text.startswith("# PROJECTION (not a measurement): mamba2-lm from NVIDIA H100 80GB HBM3 to NVIDIA H200")
    assert "## Against the run measured on NVIDIA H200" in text
    with pytest.raises(InvalidConfig, match="unknown target GPU 'b300'"):
        reporting.project(H100_RUN, "b300")
    with pytest.raises(InvalidConfig, match="measured on the NVIDIA H100 80GB HBM3, not on the target NVIDIA H200"):
        reporting.project(H100_RUN, "h200", check=H100_RUN)  # scored against a GPU it never aimed at


def test_a_projection_says_what_it_cannot_know():
    """A run without counters projects nothing (never 1.00x for every category); to another architecture the
    projection names what it cannot know and that no run on that GPU checked it; H100 to H200 is checked."""
    with pytest.raises(InvalidConfig, match="has no counters: a projection needs"):
        reporting.project(Path(__file__).parent / "data" / "traced-iteration-h100" / "mamba2-lm", "h200")
    text = reporting.project(H100_RUN, "a100-80gb")
    assert "Another architecture (Hopper to Ampere)" in text and "wgmma" in text
    assert "Never checked against a run measured on the NVIDIA A100 SXM4 80GB" in text
    assert "Another architecture" not in reporting.project(H100_RUN, "h200")
    assert "Never checked" not in reporting.project(H100_RUN, "h200")


def test_results_are_spliced_into_a_readme(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text(f"# title\n\nbefore\n{RESULTS_START}\nstale numbers\n{RESULTS_END}\n\nafter\n")
    text = reporting.results(readme)
    assert text.startswith(RESULTS_START) and text.rstrip().endswith(RESULTS_END)
    assert readme.read_text() == f"# title\n\nbefore\n{text}after\n"
    readme.write_text("# no section\n")
    with pytest.raises(InvalidConfig, match="has no <!-- results:start -->"):
        reporting.results(readme)


def test_reference_writes_a_suite_report_per_gpu_a_comparison_per_workload_and_the_sweeps(bundled_reference):
    written = list(bundled_reference.written)
    assert [p.name for p in written[:4]] == ["suite-h100-sxm.html", "suite-h200.html", "parallel-h100-sxm.html",
                                             "parallel-h200.html"]
    parallel = written[3].read_text()  # the TP=2 runs on 2 H200s, with the same host's single-GPU runs
    assert "Scaling: step time from 1 to N GPUs" in parallel and "mamba2-lm tp2x dp1 no-SP" in parallel
    assert "(NVIDIA H200, #" not in parallel  # each run's own label, none told apart by its index
    assert "Communication per multi-GPU run" in parallel and "2 all_reduce" in parallel  # Mamba-1 without SP
    sweeps = [p.name for p in written if p.name.startswith("sweep-")]  # the bundled sweeps' regime maps
    assert sweeps == ["sweep-h100-sxm-d_state-chunk_size.html", "sweep-h100-sxm-seq_len.html",
                      "sweep-h200-d_state-chunk_size.html", "sweep-h200-seq_len.html"]
    assert written[4].name == "models-h100-sxm.html"  # the shipped hybrids, on their own page
    compared = [p.name for p in written if p.name.startswith("compare-")]  # one config on both GPUs only
    assert len(compared) == len(bundled.paper_suite()) and "compare-mamba3-lm-h100-sxm-vs-h200.html" not in compared
    assert len(written) == 5 + len(compared) + len(sweeps) + 2 and all(p.exists() for p in written)
    assert [p.name for p in written[-2:]] == ["trace-h100-sxm.json", "trace-h200.json"]


def reruns(*names):
    return [DATA / "regress-reruns-h200" / name for name in names]


def test_baseline_and_regress_on_real_reruns(tmp_path):
    made = gate.baseline(reruns(*(f"baseline-{i}" for i in range(1, 5))), tmp_path / "b" / "baseline.json")
    assert made.runs == 4 and made.rows == len(schema.read_document(schema.Baseline, made.path).rows) > 0
    assert not gate.regress(reruns("rerun-1", "rerun-2"), made.path).regressed
    junit, summary = tmp_path / "gate.xml", tmp_path / "gate.md"
    planted = gate.regress(reruns("planted-chunk64"), made.path, junit=junit, summary=summary,
                           allow_different_config=True)
    assert planted.regressed and summary.read_text() == planted.summary
    assert int(ET.parse(junit).getroot().get("failures")) == int(planted.table["regressed"].sum())
    with pytest.raises(gate.IncomparableBaseline, match="is a hybrid run, the baseline is of mamba2-lm"):
        gate.regress([bundled.runs("h200")[1]], made.path)
    document = schema.read_document(schema.Baseline, made.path)
    assert document.source.gpu == "NVIDIA H200" and document.source.versions["triton"] == "3.6.0"
    assert document.source.runs == [f"baseline-{i}" for i in range(1, 5)] and document.source.driver is None


def test_gate_refuses_another_gpu_or_config_unless_told(tmp_path):
    """The baseline records GPU, driver, host, versions and config; a run of another GPU or config is refused
    with one line, or gated with a flag that the summary repeats; other differences are noted."""
    from known_work import kernels, run_info

    def info(**changes):
        base = run_info()
        base["gpu"]["clocks"] = {"driver": changes.pop("driver", "580.95.05")}
        base["host"] = {"cpu": changes.pop("cpu", "Intel Xeon Platinum 8480+")}
        base["versions"] = {"torch": changes.pop("torch", "2.11.0"), "triton": "3.6.0"}
        if "gpu" in changes:
            base["gpu"]["name"] = changes.pop("gpu")
        if "config" in changes:
            base["workload"]["config"] = changes.pop("config")
        return base

    runs = [schema.write_run(tmp_path / f"base{i}",
                             schema.new_run_info({**info(), "created": f"2026-01-01T00:0{i}:00+00:00"}),
                             kernels()) for i in range(2)]  # two runs: one run given twice is refused
    made = gate.baseline(runs, tmp_path / "baseline.json")
    source = schema.read_document(schema.Baseline, made.path).source
    assert (source.gpu, source.driver, source.host, source.versions["torch"]) == \
        ("NVIDIA H100 80GB HBM3", "580.95.05", {"cpu": "Intel Xeon Platinum 8480+"}, "2.11.0")
    other_gpu = schema.write_run(tmp_path / "gpu", schema.new_run_info(info(gpu="NVIDIA H200")), kernels())
    with pytest.raises(gate.IncomparableBaseline, match="ran on NVIDIA H200, the baseline on NVIDIA H100 80GB "
                                                        "HBM3: .* or pass --allow-different-gpu"):
        gate.regress([other_gpu], made.path)
    allowed = gate.regress([other_gpu], made.path, allow_different_gpu=True)
    assert "gated across GPUs (NVIDIA H100 80GB HBM3 -> NVIDIA H200), explicitly allowed by " \
           "--allow-different-gpu" in allowed.summary
    other_config = schema.write_run(tmp_path / "config", schema.new_run_info(info(config={"seq_len": 4096})), kernels())
    with pytest.raises(gate.IncomparableBaseline, match=r"another config than the baseline \(seq_len 2048 -> "
                                                        r"4096\)"):
        gate.regress([other_config], made.path)
    moved_info = schema.new_run_info(info(driver="590.1", cpu="AMD EPYC 9654", torch="2.12.0"))
    moved = schema.write_run(tmp_path / "moved", moved_info, kernels())
    result = gate.regress([moved], made.path)
    assert not result.regressed
    for note in ("driver 580.95.05 -> 590.1", "another host (CPU Intel Xeon Platinum 8480+ -> AMD EPYC 9654)",
                 "library versions differ: torch 2.11.0 -> 2.12.0"):
        assert note in result.summary
    with pytest.raises(gate.IncomparableBaseline, match="differs from .* in GPU"):
        gate.baseline([runs[0], other_gpu], tmp_path / "mixed.json")


def test_prepare_applies_overrides_and_the_warmup_default():
    options = measure.WorkloadOptions("hybrid", "tiny", seq_len=32, sets=["d_state=8"])
    ready = measure.prepare(options, "cpu")
    assert ready.cfg.seq_len == 32 and ready.overrides == {"d_state": "8", "seq_len": 32}
    assert ready.warmup == measure.WARMUP["cpu"] and ready.plan.device == "cpu"
    assert measure.prepare(measure.WorkloadOptions("hybrid", "tiny", warmup=0), "cpu").warmup == 0
    with pytest.raises(InvalidConfig, match="--set expects KEY=VALUE"):
        measure.prepare(measure.WorkloadOptions("hybrid", "tiny", sets=["d_state"]), "cpu")


def test_a_malformed_set_is_refused_before_a_users_model_file_is_imported(tmp_path):
    """Importing a user's model file runs its code: a typo in --set is refused before that."""
    model = tmp_path / "model.py"
    model.write_text("raise SystemExit('imported')\n")
    with pytest.raises(InvalidConfig, match="--set expects KEY=VALUE"):
        measure.prepare(measure.WorkloadOptions(f"{model}:Model", "tiny", sets=["d_state"]), "cpu")


def test_train_on_cpu_writes_its_json(tmp_path):
    result = measure.train(measure.WorkloadOptions("mamba2-lm", "tiny", warmup=0), "cpu", 1, tmp_path / "r.json")
    assert result.device == "cpu" and len(result.step_times_ms) == 1
    assert json.loads((tmp_path / "r.json").read_text())["workload"] == "mamba2-lm"


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU path")
def test_profile_and_suite_need_a_gpu(tmp_path):
    with pytest.raises(NoGpu, match="needs a CUDA GPU"):
        measure.profile(measure.ProfileRequest(measure.WorkloadOptions("mamba2-lm", "tiny"),
                                               measure.ProfileSettings(tmp_path)))
    with pytest.raises(NoGpu, match="no CUDA GPU is visible"):
        measure.suite(tmp_path)
    with pytest.raises(InvalidConfig, match="--counters must be sampled, all, focus or none"):
        measure.suite(tmp_path, counters="some")
    assert list(tmp_path.iterdir()) == []


def test_suite_profiles_each_workload_through_profile(tmp_path, monkeypatch):
    """The suite is `profile` per workload with the preset's settings (the warm-up left to its default), then
    one report and the manifest; here `profile` hands back copies of the bundled runs."""
    calls = []

    def fake_profile(request, progress=None):
        options, settings = request.workload, request.settings
        calls.append((options, settings.steps, settings.counters, progress))
        return Path(shutil.copytree(bundled.REFERENCE / "h100-sxm" / options.workload,
                                    settings.out / options.workload))

    monkeypatch.setattr(measure, "resolve_device", lambda device: "cuda")
    monkeypatch.setattr(measure, "profile", fake_profile)
    opened = []
    result = measure.suite(tmp_path, "paper", ["mamba2-lm", "hybrid"], "none", 3,
                           lambda name: opened.append(name) or _null_progress())
    assert [c[0] for c in calls] == [measure.WorkloadOptions("mamba2-lm", "paper"),
                                     measure.WorkloadOptions("hybrid", "paper")]
    assert {(c[1], c[2]) for c in calls} == {(3, "none")} and opened == ["mamba2-lm", "hybrid"]
    assert result.report.exists() and (tmp_path / "suite-csv" / "suite-category_shares.csv").exists()
    manifest = schema.read_document(schema.SuiteManifest, result.manifest)
    assert manifest.runs == ["mamba2-lm", "hybrid"] and manifest.preset == "paper" and manifest.wall_s > 0


def _null_progress():
    return contextlib.nullcontext(lambda stage, done, total: None)


def test_calibrate_writes_a_device_profile_its_readers_accept(tmp_path, monkeypatch):
    """`run_calibration` stubbed with the counters of the known-work kernels (the copy one 10 % short), and an
    L1 ceiling below L2's, which the profile drops with a note; DRAM from the faster collector (the events)."""
    from ssmprof.profiler import calibrate, environment

    known = {work["check"]: work["expected"] for work in calibrate.KNOWN_WORK}
    report = pd.DataFrame({
        "kernel_name": ["nvjet_sm90_tst_256x128", "fma_chain", "vectorized_elementwise_kernel", "l1_read", "l2_read"],
        "ncu_duration_ns": [1e5, 1e5, 1e6, 1e5, 1e5],
        "tensor_ops_bf16": [known["tensor FLOPs (bf16 GEMM)"], 0.0, 0.0, 0.0, 0.0],
        "inst_ffma": [0.0, known["vector FLOPs (fp32 FMA chain)"] / 2, 0.0, 0.0, 0.0],
        "inst_fadd": 0.0, "inst_fmul": 0.0,
        "dram_read_bytes": [0.0, 0.0, 0.45 * known["DRAM bytes (copy kernel)"], 0.0, 0.0],
        "dram_write_bytes": [0.0, 0.0, 0.45 * known["DRAM bytes (copy kernel)"], 0.0, 0.0],
        "l1_bytes": [0.0, 0.0, 0.0, known["L1 bytes (L1 read kernel)"], known["L1 bytes (L2 read kernel)"]],
        # the L2 ceiling comes from the L2 read kernel's counters, in the L2 slices' bytes
        "l2_bytes": [0.0, 0.0, 0.0, 0.0, 1.2 * known["L1 bytes (L2 read kernel)"]],
    })
    ceilings = {"dram_gb_s": 2960.0, "l2_gb_s": 4718.0, "l1_gb_s": 3425.0, "bf16_tensor_tflops": 771.7,
                "fp32_tflops": 25.0, "source": MEASURED}
    monkeypatch.setattr(calibrate, "run_calibration", lambda timeout, keep: (report, ceilings, 11.0))
    # an H100's memory under an H200's name: the profile says the host's GPU is not the part its name matched
    monkeypatch.setattr(environment, "gpu_properties", lambda cuda=True: {
        "name": "NVIDIA H200", "l2_bytes": None, "memory_bytes": 85017493504})
    wrong = measure.calibrate(tmp_path / "x.json").profile.note
    assert "reports 85.0 GB, its datasheet row (NVIDIA H200 SXM 141GB) 141 GB" in wrong
    monkeypatch.setattr(environment, "gpu_properties", lambda cuda=True: {
        "name": "NVIDIA H100 80GB HBM3", "l2_bytes": None, "memory_bytes": 85017493504})
    result = measure.calibrate(tmp_path / "device.json")
    assert result.failed == ["DRAM bytes (copy kernel)"]
    profile = read_device_profile(result.path)
    assert profile == result.profile and profile.datasheet["dram_gb_s"] == 3350.0
    assert profile.measured.l1_gb_s is None and "not above the L2 ceiling" in profile.note
    assert "not the part" not in profile.note and "clocks" in profile.gpu.model_dump()  # as the host has it
    run = schema.read_run(H100_RUN)
    assert run_ceilings(run.info.gpu.name, H100_RUN, profile)[0].dram_gb_s == 2960.0
