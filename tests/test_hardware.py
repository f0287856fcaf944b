"""The hardware room: the datasheet table, and which ceilings a run's roofline stands on."""

import shutil
from pathlib import Path

import pytest

import ssmprof
from ssmprof import bundled, schema
from ssmprof.analysis.summaries.run import warnings_for
from ssmprof.hardware import (
    DATASHEET,
    DEVICE_PROFILE,
    PRE_PROBE_NOTE,
    SPECS,
    Ceilings,
    identity_note,
    read_device_profile,
    run_ceilings,
    spec_for,
)


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


# --- Which ceilings a run stands on (`hardware.run_ceilings`). Runs are named by their GPU; profiles by where
# they sit. "bundled" is the bundled device profile of the run's GPU model.
H100_NAME, H200_NAME = "NVIDIA H100 80GB HBM3", "NVIDIA H200"
MEASURED = "measured by ssmprof calibrate"


def place_profile(folder: Path, gpu: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(bundled.device_profile(gpu), folder / DEVICE_PROFILE)


@pytest.mark.parametrize(
    ("gpu_name", "beside", "given", "expected_gpu", "where", "notes"),
    [
        # a profile in the run directory, or in its parent folder (where the bundled ones sit)
        (H100_NAME, "run", None, "h100-sxm", "device profile beside the run", 0),
        (H100_NAME, "parent", None, "h100-sxm", "device profile beside the run", 0),
        # nothing beside the run: the bundled profile of its GPU model
        (H100_NAME, None, None, "h100-sxm", f"bundled device profile of the {H100_NAME}", 0),
        # (the bundled H200 profile predates the ceiling probes: one note more, PRE_PROBE_NOTE)
        (H200_NAME, None, None, "h200", f"bundled device profile of the {H200_NAME}", 1),
        # an explicit profile of the same GPU wins over the one beside the run
        (H100_NAME, "parent", "h100-sxm", "h100-sxm", "given with --device-profile", 0),
        # a profile of another GPU is never applied, given or beside the run, and a note says so
        (H200_NAME, "parent", None, "h200", f"bundled device profile of the {H200_NAME}", 2),
        (H200_NAME, None, "h100-sxm", "h200", f"bundled device profile of the {H200_NAME}", 2),
        (H100_NAME, "parent", "h200", "h100-sxm", "device profile beside the run", 1),
        # a GPU without a bundled profile: its datasheet row
        ("NVIDIA A100-SXM4-80GB", None, None, "a100-80gb", DATASHEET, 0),
        ("NVIDIA A100-SXM4-80GB", "parent", None, "a100-80gb", DATASHEET, 1),
    ],
)
def test_a_run_stands_on_its_own_gpus_ceilings(tmp_path, gpu_name, beside, given, expected_gpu, where, notes):
    run_dir = tmp_path / "runs" / "run"
    run_dir.mkdir(parents=True)
    if beside is not None:  # the H100 profile, inside the run directory or beside it
        place_profile(run_dir if beside == "run" else run_dir.parent, "h100-sxm")
    profile = read_device_profile(bundled.device_profile(given)) if given else None
    ceilings, said = run_ceilings(gpu_name, run_dir, profile)
    if where == DATASHEET:
        assert ceilings == Ceilings.from_datasheet(SPECS[expected_gpu])
    else:
        measured = read_device_profile(bundled.device_profile(expected_gpu)).measured
        assert (ceilings.dram_gb_s, ceilings.l2_gb_s, ceilings.bf16_tensor_tflops) == (
            measured.dram_gb_s, measured.l2_gb_s, measured.bf16_tensor_tflops)
        assert ceilings.source == f"{MEASURED}, {where}"
    assert len(said) == notes and all("not applied" in note or note == PRE_PROBE_NOTE for note in said)


def test_a_gpu_without_profile_or_datasheet_row_has_no_roofline():
    assert run_ceilings("Some Future GPU") == (None, [])
    ceilings, said = run_ceilings("Some Future GPU", None, read_device_profile(bundled.device_profile("h200")))
    assert ceilings is None and "not applied" in said[0] and "no roofline" in said[1]


def test_bundled_runs_find_their_gpus_profile_beside_them():
    """The rule as `ssmprof reference` meets it: every bundled run, sweep point, multi-GPU run and shipped model on
    its GPU's bundled profile, whether beside it (the suite) or found by its GPU model (sweeps, parallel runs, the
    shipped models), never on the calibration of its host kept in its own directory (mamba3-lm on the H100, the
    shipped models): one set of ceilings per GPU on every reference page."""
    kept = 0
    for gpu in bundled.GPUS:
        profile = read_device_profile(bundled.device_profile(gpu))
        measured, expected_notes = profile.measured, [] if profile.set_by else [PRE_PROBE_NOTE]
        paths = bundled.runs(gpu) + bundled.parallel_runs(gpu) + bundled.shipped_models(gpu)
        paths += [point.parent for folder in bundled.sweeps(gpu) for point in folder.glob("*/run.json")]
        for path in paths:
            info = schema.read_run(path).info
            ceilings, said = run_ceilings(info.gpu.name, path)
            assert ((ceilings.dram_gb_s, ceilings.bf16_tensor_tflops, ceilings.l1_gb_s), said) == (
                (measured.dram_gb_s, measured.bf16_tensor_tflops, measured.l1_gb_s), expected_notes), path
            kept += (path / DEVICE_PROFILE).is_file()
    assert kept == 3  # H100: mamba3-lm, hf-bamba, hf-nemotron-h


def test_a_profile_inside_a_run_directory_applies_outside_the_bundled_runs(tmp_path):
    """A copy of a bundled run with its host's calibration, outside the package, stands on that calibration: the
    bundled runs' exception is theirs alone."""
    run = tmp_path / "mamba3-lm"
    shutil.copytree(bundled.REFERENCE / "h100-sxm" / "mamba3-lm", run)
    ceilings, _ = run_ceilings(schema.read_run(run).info.gpu.name, run)
    own = read_device_profile(run / DEVICE_PROFILE).measured
    assert (ceilings.bf16_tensor_tflops, ceilings.source) == (own.bf16_tensor_tflops,
                                                              f"{MEASURED}, device profile beside the run")


@pytest.mark.parametrize(("gpu", "named_as", "mismatch"), [("h100-sxm", None, False), ("h200", None, False),
                                                          ("h100-sxm", "NVIDIA H200", True),
                                                          ("h200", "NVIDIA H100 80GB HBM3", True)])
def test_a_gpu_whose_memory_is_not_its_datasheet_rows_is_named(gpu, named_as, mismatch):
    """The bundled device profiles' GPUs as their hosts reported them agree with their datasheet rows; an H100
    calling itself an H200 (or the reverse) is a note `calibrate` writes into the profile."""
    found = read_device_profile(bundled.device_profile(gpu)).gpu
    note = identity_note(named_as or found.name, found.memory_bytes)
    assert (note is not None) == mismatch
    if mismatch:
        assert "the host's GPU is not the part its name matched" in note


def test_ceilings_calibrated_before_the_probes_are_said_to_be_on_every_page_of_their_gpu():
    """The bundled H200 profile predates the ceiling probes (no `set_by`) and no H200 could be had to measure it again:
    each H200 run says so above its tables, with the launches above the roof counted; the H100's, probed, says
    nothing."""
    h200 = ssmprof.load(bundled.REFERENCE / "h200" / "mamba2-lm")
    ceilings, notes = run_ceilings(h200.info.gpu.name, h200.path)
    assert PRE_PROBE_NOTE in notes and ceilings is not None
    roof = h200.summary.roofline["pct_of_roof"]
    assert (roof > 100).sum() == 88 and roof.max() == pytest.approx(106.3, abs=0.05)
    assert h200.summary.calibration_defects["launches"].sum() == 5
    assert PRE_PROBE_NOTE in warnings_for(h200, h200.summary, notes)
    h100 = ssmprof.load(bundled.REFERENCE / "h100-sxm" / "mamba2-lm")
    assert PRE_PROBE_NOTE not in run_ceilings(h100.info.gpu.name, h100.path)[1]
