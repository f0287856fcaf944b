"""The run-directory contract: atomic writes, validation, and one clear error for every kind of damage."""

import gzip
import json
from pathlib import Path

import pandas as pd
import pytest

from ssmprof import schema
from ssmprof.errors import CorruptRun, SsmprofError

GH100_METRICS = Path(__file__).resolve().parents[2] / "shared" / "ncu" / "gh100-metrics-ncu2025.3.1.txt.gz"


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
    path = schema.write_run(tmp_path / "run", run_info(), kernel_rows())
    run = schema.read_run(path)
    assert list(run.kernels.columns) == list(schema.ALL_COLUMNS)
    assert run.kernels["kernel_name"].tolist() == kernel_rows()["kernel_name"].tolist()
    assert run.kernels["dram_read_bytes"].isna().tolist() == [False, False, True, False, False]
    assert run.kernels["l2_hit_rate_pct"].isna().all()  # not collected -> NaN, not 0
    assert run.info["status"] == "complete" and run.info["schema_version"] == schema.SCHEMA_VERSION
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no staging left behind


def test_existing_run_is_not_overwritten_by_accident(tmp_path):
    schema.write_run(tmp_path / "run", run_info(), kernel_rows())
    with pytest.raises(SsmprofError, match="exists already"):
        schema.write_run(tmp_path / "run", run_info(), kernel_rows())
    schema.write_run(tmp_path / "run", run_info(harness={"step_ms": 1.0, "throughput": 2.0}), kernel_rows(),
                     overwrite=True)
    assert schema.read_run(tmp_path / "run").info["harness"]["step_ms"] == 1.0


def test_failed_write_leaves_nothing(tmp_path, monkeypatch):
    def disk_full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(pd.DataFrame, "to_parquet", disk_full)
    with pytest.raises(SsmprofError, match="No space left on device"):
        schema.write_run(tmp_path / "run", run_info(), kernel_rows())
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
        schema.write_run(tmp_path / "run", run_info(), frame_change(kernel_rows()))


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
        ("newer schema", "schema version 99"),
    ],
)
def test_damaged_runs_give_one_clear_error(tmp_path, how, message):
    path = schema.write_run(tmp_path / "run", run_info(), kernel_rows())
    damage(path, how)
    with pytest.raises(CorruptRun, match=message.replace("(", r"\(").replace(")", r"\)")):
        schema.read_run(path)


@pytest.mark.skipif(not GH100_METRICS.exists(), reason="shared/ncu metric list not beside the checkout")
def test_every_counter_metric_exists_on_gh100():
    """Metric names checked against `ncu --query-metrics --chip gh100` (ncu 2025.3.1)."""
    with gzip.open(GH100_METRICS, "rt") as f:
        known = {line.split()[0].split(".")[-1] for line in f if line.strip() and not line.startswith(("-", " "))}
    for column, (metric, _, _) in schema.COUNTER_METRICS.items():
        base = metric.split(".")[0]
        assert base in known, f"{column}: {base} is not a gh100 metric"
