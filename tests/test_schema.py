"""The run-directory contract: atomic writes, validation, and one clear error for every kind of damage."""

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from ssmprof import bundled, schema
from ssmprof.analysis.launches.frame import analysis_frame
from ssmprof.errors import CorruptFile, CorruptRun, SsmprofError


def kernel_rows():
    # Names as they appear in our H100 mamba2-lm iterations (gpu-facts.md).
    names = ["_chunk_cumsum_fwd_kernel", "_chunk_scan_fwd_kernel", "_chunk_scan_chunk_state_bwd_dx_kernel",
             "nvjet_hsh_128x256_64x4_1x2_h_bz_coopA_NNT", "multi_tensor_apply_kernel"]
    phases = ["forward", "forward", "backward", "backward", "optimizer"]
    return pd.DataFrame({
        "launch_idx": range(5), "kernel_name": names, "kernel_name_full": names, "phase": phases,
        "launch_op": ["", "", "", "aten::mm", "aten::_fused_adamw_"], "stream": [7] * 5,
        "grid_x": [16, 128, 128, 66, 540], "grid_y": [8, 8, 8, 1, 1], "grid_z": [4, 4, 4, 1, 1],
        "block_x": [128, 256, 256, 384, 512], "block_y": [1] * 5, "block_z": [1] * 5, "shared_mem_bytes": [0] * 5,
        "launch_shapes": ["", "", "", "[[8192,4096],[4096,16384]]", ""],
        "start_ns": [0, 5_000, 400_000, 900_000, 1_500_000], "duration_ns": [4_500, 121_000, 310_000, 90_000, 60_000],
        "counter_status": ["measured", "measured", "unmatched", "measured", "lent"], "counter_lender": [0, 1, -1, 3, 3],
        "dram_read_bytes": [1.0e6, 2.5e7, float("nan"), 3.0e7, 8.0e7],
    })


def run_info(**changes):
    info = {
        "workload": {"name": "mamba2-lm", "preset": "small", "config": {"seq_len": 2048}},
        "gpu": {"name": "NVIDIA H100 80GB HBM3"}, "versions": {"torch": "2.11.0"}, "provenance": {"ssd": "triton"},
        "harness": {"step_ms": 30.0, "throughput": 273284.0}, "collectors": {},
        "coverage": {"launches": 5, "phase_time_fraction": 1.0, "counter_time_fraction": 0.8},
    }
    info.update(changes)
    return info


def test_round_trip_keeps_contract_columns_and_dtypes(tmp_path):
    path = schema.write_run(tmp_path / "run", schema.new_run_info(run_info()), kernel_rows())
    run = schema.read_run(path)
    assert list(run.kernels.columns) == list(schema.ALL_COLUMNS)
    assert run.kernels["kernel_name"].tolist() == kernel_rows()["kernel_name"].tolist()
    assert run.kernels["dram_read_bytes"].isna().tolist() == [False, False, True, False, False]
    assert run.kernels["l2_hit_rate_pct"].isna().all()  # not collected -> NaN, not 0
    assert run.info.status == "complete" and run.info.schema_version == schema.SCHEMA_VERSION
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no staging left behind


def test_a_table_already_in_contract_form_is_kept_as_it_is():
    """What `write_run` wrote comes back in contract order and dtypes: `conform_kernels` keeps its arrays (a
    million launches are not copied again) and gives the frame the column-by-column conversion gives."""
    conformed = schema.conform_kernels(kernel_rows())
    kept = schema.conform_kernels(conformed)
    assert np.shares_memory(kept["dram_read_bytes"].to_numpy(), conformed["dram_read_bytes"].to_numpy())
    pd.testing.assert_frame_equal(kept, conformed)
    shuffled = conformed[list(reversed(conformed.columns))]
    pd.testing.assert_frame_equal(schema.conform_kernels(shuffled), conformed)


def test_existing_run_is_not_overwritten_by_accident(tmp_path):
    schema.write_run(tmp_path / "run", schema.new_run_info(run_info()), kernel_rows())
    with pytest.raises(SsmprofError, match="exists already"):
        schema.write_run(tmp_path / "run", schema.new_run_info(run_info()), kernel_rows())
    changed = schema.new_run_info(run_info(harness={"step_ms": 1.0, "throughput": 2.0}))
    schema.write_run(tmp_path / "run", changed, kernel_rows(), overwrite=True)
    assert schema.read_run(tmp_path / "run").info.harness.step_ms == 1.0


def test_failed_write_leaves_nothing(tmp_path, monkeypatch):
    def disk_full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(pd.DataFrame, "to_parquet", disk_full)
    with pytest.raises(SsmprofError, match="No space left on device"):
        schema.write_run(tmp_path / "run", schema.new_run_info(run_info()), kernel_rows())
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("frame_change", "message"),
    [
        (lambda f: f.drop(columns=["phase"]), "lacks required columns: phase"),
        (lambda f: f.assign(phase=["forward"] * 4 + ["sideways"]), "unknown phase values"),
        (lambda f: f.assign(grid_x=["a"] * 5), "grid_x cannot be int64"),
        (lambda f: f.assign(mystery=1), "outside the contract: mystery"),
    ],
)
def test_bad_kernel_tables_are_refused(tmp_path, frame_change, message):
    with pytest.raises(schema.SchemaError, match=message):
        schema.write_run(tmp_path / "run", schema.new_run_info(run_info()), frame_change(kernel_rows()))


def damage(path: Path, how: str) -> None:
    info_file, table_file = path / schema.RUN_JSON, path / schema.KERNELS_PARQUET
    if how == "no run.json":
        info_file.unlink()
    elif how == "truncated json":
        info_file.write_text(info_file.read_text()[:40])
    elif how == "failed status":
        info_file.write_text(json.dumps({**json.loads(info_file.read_text()), "status": "failed: ncu crashed"}))
    elif how == "missing key":
        info = json.loads(info_file.read_text())
        del info["coverage"]["counter_time_fraction"]
        info_file.write_text(json.dumps(info))
    elif how == "garbage parquet":
        table_file.write_bytes(b"PAR1 this is not parquet")
    elif how == "no parquet":
        table_file.unlink()
    elif how == "empty kernel table":
        pd.read_parquet(table_file).iloc[:0].to_parquet(table_file)
    elif how == "newer schema":
        info_file.write_text(json.dumps({**json.loads(info_file.read_text()), "schema_version": 99}))


@pytest.mark.parametrize(
    ("how", "message"),
    [
        ("no run.json", "is not a run directory"),
        ("truncated json", "is not valid JSON"),
        ("failed status", "not a complete run (status: failed: ncu crashed)"),
        ("missing key", "run.json lacks: coverage.counter_time_fraction"),
        ("garbage parquet", "kernels.parquet cannot be read"),
        ("no parquet", "kernels.parquet cannot be read"),
        ("empty kernel table", "kernels.parquet holds no kernels"),
        ("newer schema", "schema version 99"),
    ],
)
def test_damaged_runs_give_one_clear_error(tmp_path, how, message):
    path = schema.write_run(tmp_path / "run", schema.new_run_info(run_info()), kernel_rows())
    damage(path, how)
    with pytest.raises(CorruptRun, match=message.replace("(", r"\(").replace(")", r"\)")):
        schema.read_run(path)


def test_run_json_refuses_keys_it_does_not_declare():
    """A key run.json does not declare is refused before anything is written (a writer's typo, or a key added
    without its declaration in `schema.RunInfo`), in one line naming it."""
    with pytest.raises(schema.SchemaError, match=r"checks\.timeline_vs_ncu"):
        schema.new_run_info(run_info(checks={"timeline_vs_ncu": "passed"}))


def test_run_json_checks_rejected_rows_validate_with_and_without_gemm_evidence(tmp_path):
    rows = [{"kernel_name": "Kernel2", "phase": "backward", "check": "GEMM FLOPs", "launches": 42,
             "time_ns": 497642, "gemm_ratio": 3.1, "gemm_ratio_max": 4.2},
            {"kernel_name": "reduce_kernel", "phase": "backward", "check": "duration", "launches": 5,
             "time_ns": 50977, "gemm_ratio": None, "gemm_ratio_max": None},
            {"kernel_name": "Kernel", "phase": "backward", "check": "duration", "launches": 1, "time_ns": 11648}]
    path = schema.write_run(tmp_path / "run", schema.new_run_info(run_info(checks={"rejected": rows})), kernel_rows())
    assert [row.model_dump(exclude_unset=True) for row in schema.read_run(path).info.checks.rejected] == rows
    rows[0]["gemm_ratio"] = "high"
    with pytest.raises(schema.SchemaError, match=r"run.json checks.rejected.0.gemm_ratio: Input should be a valid"):
        schema.write_run(tmp_path / "other", schema.new_run_info(run_info(checks={"rejected": rows})), kernel_rows())


def test_run_json_with_a_wrong_type_is_one_line(tmp_path):
    path = schema.write_run(tmp_path / "run", schema.new_run_info(run_info()), kernel_rows())
    info = json.loads((path / schema.RUN_JSON).read_text())
    info["coverage"]["launches"] = "many"
    (path / schema.RUN_JSON).write_text(json.dumps(info))
    with pytest.raises(CorruptRun, match="run.json coverage.launches: Input should be a valid integer") as caught:
        schema.read_run(path)
    assert "\n" not in str(caught.value)


def device_profile_fields(**changes):
    fields = {
        "gpu": {"name": "NVIDIA H100 80GB HBM3", "sm_count": 132},
        "measured": {"dram_gb_s": 2960.2, "l2_gb_s": 4718.4, "bf16_tensor_tflops": 771.7, "fp32_tflops": 25.0},
        "datasheet": {"dram_gb_s": 3350.0}, "ncu_wall_s": 11.0,
        "checks": [{"check": "DRAM bytes (copy kernel)", "kernel": "(not found)", "expected": 2.0, "measured": math.nan,
                    "unit": "bytes", "error_pct": math.nan, "tolerance_pct": 2.0, "passed": False}],
    }
    return {**fields, **changes}


def test_device_profile_round_trip(tmp_path):
    written = schema.make_document(schema.DeviceProfile, **device_profile_fields())
    path = schema.write_document(written, tmp_path / "sub" / "device.json")
    read = schema.read_document(schema.DeviceProfile, path)
    assert read.version == schema.DeviceProfile.VERSION and read.gpu.name == "NVIDIA H100 80GB HBM3"
    assert read.gpu.model_extra == {"sm_count": 132} and read.measured.source == "measured by ssmprof calibrate"
    assert read.checks[0].measured is None  # NaN (kernel not found) is written as null


def test_bundled_device_profiles_are_valid():
    for gpu in bundled.GPUS:
        profile = schema.read_document(schema.DeviceProfile, bundled.device_profile(gpu))
        failed = [check.check for check in profile.checks if not check.passed]
        assert profile.measured.dram_gb_s > 1000 and failed in ([], ["L1 bytes (L1 read kernel)"])
        if failed:  # the H100's L1 read kernel miscounts its bytes: no L1 ceiling, and the profile says why
            assert profile.measured.l1_gb_s is None and "no L1 ceiling" in profile.note


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "cannot read device profile"),
        ("{", "is not valid JSON"),
        ("[]", "is not a JSON object"),
        ({"version": 0}, "has version 0, this ssmprof reads 1"),
        ({"version": 2}, "has version 2, this ssmprof reads 1"),
        ({"measured": {"dram_gb_s": 1.0}}, "lacks: measured.bf16_tensor_tflops, measured.fp32_tflops"),
        ({"measured": {"dram_gb_s": "fast", "bf16_tensor_tflops": 1, "fp32_tflops": 1}},
         "measured.dram_gb_s: Input should be a valid number"),
        ({"ceilings": {}}, "unknown keys: ceilings"),
        ({"gpu": {}}, "lacks: gpu.name"),
    ],
)
def test_bad_device_profile_is_one_line(tmp_path, content, message):
    path = tmp_path / "device.json"
    if content is not None:
        path.write_text(content if isinstance(content, str) else json.dumps({**device_profile_fields(), **content}))
    with pytest.raises(CorruptFile) as caught:
        schema.read_document(schema.DeviceProfile, path)
    assert message in str(caught.value) and "\n" not in str(caught.value)


def baseline_rows():
    from ssmprof.analysis.change.gate import build_baseline

    frame = analysis_frame(schema.conform_kernels(kernel_rows()))
    return build_baseline([frame, frame.assign(duration_ns=frame["duration_ns"] * 2)])


SOURCE = {"gpu": "NVIDIA H100 80GB HBM3", "driver": "580.95.05", "host": {"cpu": "Intel Xeon"},
          "versions": {"torch": "2.11.0"}, "runs": ["a", "b"]}


def test_baseline_round_trip_and_row_columns(tmp_path):
    from ssmprof.analysis.change.gate import ROW_KEY

    table = baseline_rows()
    assert list(schema.BaselineRow.model_fields) == ROW_KEY + ["metric", "median", "spread", "runs"] == \
        list(table.columns)
    assert set(table["scope"]) == {"total", "phase", "category", "site", "kernel"}
    document = schema.make_document(schema.Baseline, workload=run_info()["workload"], source=SOURCE,
                                    rows=table.to_dict("records"))
    read = schema.read_document(schema.Baseline, schema.write_document(document, tmp_path / "baseline.json"))
    pd.testing.assert_frame_equal(read.table(), table, check_dtype=False)
    assert read.workload.name == "mamba2-lm" and read.source.driver == "580.95.05"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"version": 1}, "has version 1, this ssmprof reads 2: rebuild it from its runs with `ssmprof baseline"),
        ({"version": 3}, "has version 3, this ssmprof reads 2"),
        ({"version": None}, "has version None"),
        ({"version": ...}, "has no version: it is not a baseline that ssmprof wrote"),  # ...: the key removed
        ({"rows": [{"kernel_name": "x"}]}, "lacks: rows.0.scope, rows.0.metric"),
        ({"rows": "all of them"}, "rows: Input should be a valid list"),
    ],
)
def test_bad_baseline_is_one_line(tmp_path, change, message):
    document = schema.make_document(schema.Baseline, workload=run_info()["workload"], source=SOURCE,
                                    rows=baseline_rows().to_dict("records"))
    path = tmp_path / "baseline.json"
    changed = {**json.loads(document.model_dump_json()), **change}
    path.write_text(json.dumps({key: value for key, value in changed.items() if value is not ...}))
    with pytest.raises(CorruptFile) as caught:
        schema.read_document(schema.Baseline, path)
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_suite_manifest_round_trip_and_a_bad_one(tmp_path):
    manifest = schema.make_document(schema.SuiteManifest, preset="paper", counters="sampled", steps=5,
                                    workloads=["mamba2-lm"], runs=["mamba2-lm-paper-20261122-101500"], wall_s=93.5)
    path = schema.write_document(manifest, tmp_path / schema.SUITE_MANIFEST)
    assert schema.read_document(schema.SuiteManifest, path) == manifest
    path.write_text(json.dumps({**json.loads(path.read_text()), "runs": None}))
    with pytest.raises(CorruptFile, match="suite manifest .* is not a valid suite manifest: runs: Input should be"):
        schema.read_document(schema.SuiteManifest, path)


def test_writing_an_invalid_document_is_refused():
    with pytest.raises(schema.SchemaError, match="suite manifest lacks: wall_s"):
        schema.make_document(schema.SuiteManifest, preset="paper", counters="none", steps=1, workloads=[], runs=[])


def test_the_profiler_reads_and_writes_files_only_through_the_contract_and_imports_no_analysis():
    """Every file the profiler hands on (rank jobs and results, tables, traces, autotune pins, pass records) goes
    through `schema`; no profiler module opens, reads or writes a file itself, nor imports `analysis`. Reading
    Linux's /proc and /sys (`profiler.environment.cpu_model`, `environment._kernel_text`, which refuses any other
    path) observes the host and hands no file on."""
    import ast

    profiler = Path(__file__).parent.parent / "ssmprof" / "profiler"
    io_calls = {"open", "read_text", "write_text", "read_bytes", "write_bytes", "to_parquet", "read_parquet",
                "touch", "mkdir", "unlink", "rmtree", "copyfile"}
    io_modules = {"json": {"dump", "load"}, "gzip": {"open"}}  # json.dumps of argv and columns is no I/O
    found = []
    for path in sorted(profiler.glob("*.py")):
        tree = ast.parse(path.read_text())
        observers = [node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef) and
                     path.name == "environment.py" and node.name == "_kernel_text"]
        observed = {id(node) for observer in observers for node in ast.walk(observer)}
        for node in ast.walk(tree):
            if id(node) in observed:
                continue
            if isinstance(node, ast.Call):
                name = getattr(node.func, "attr", getattr(node.func, "id", ""))
                owner = getattr(getattr(node.func, "value", None), "id", "")
                proc = name == "open" and node.args and str(getattr(node.args[0], "value", "")).startswith("/proc/")
                if ((name in io_calls and owner != "tl") or name in io_modules.get(owner, ())) and not proc:
                    found.append(f"{path.name}:{node.lineno} {name}")
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("ssmprof.analysis"):
                found.append(f"{path.name}:{node.lineno} imports {node.module}")
    assert found == []
