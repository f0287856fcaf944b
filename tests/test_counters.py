"""Counter collector: joining a report to the timeline, and one clear error for each way ncu can fail."""

import math
import os
import stat

import pandas as pd
import pytest
from typer.testing import CliRunner

from ssmprof.cli import app
from ssmprof.profiler.counters import (
    PERMISSION_HINT,
    CounterCollectionError,
    attach_counters,
    run_ncu,
    unmatched_profiled,
)
from ssmprof.schema import conform_kernels

NAN = math.nan


def timeline():
    """Launches as the timeline records them: two configurations of one GEMM, a scan kernel twice."""
    rows = [
        ("nvjet_hsh_128x256", 66, 384, "forward"),
        ("_chunk_scan_fwd_kernel", 512, 256, "forward"),
        ("nvjet_hsh_128x256", 132, 384, "backward"),
        ("_chunk_scan_fwd_kernel", 512, 256, "backward"),  # recomputed in backward: same configuration
        ("nvjet_hsh_128x256", 66, 384, "backward"),
    ]
    frame = pd.DataFrame({
        "launch_idx": range(len(rows)), "kernel_name": [r[0] for r in rows], "kernel_name_full": [r[0] for r in rows],
        "phase": [r[3] for r in rows], "launch_op": "", "stream": 7,
        "grid_x": [r[1] for r in rows], "grid_y": 1, "grid_z": 1, "block_x": [r[2] for r in rows], "block_y": 1,
        "block_z": 1, "start_ns": range(0, 5000, 1000), "duration_ns": [100, 200, 300, 400, 500],
    })
    return conform_kernels(frame)


def report(rows):
    return pd.DataFrame(rows, columns=["kernel_name", "grid_size", "block_size", "dram_read_bytes"])


@pytest.mark.parametrize(
    ("mode", "report_rows", "expected"),
    [
        # sampled: one profiled launch per configuration lends its counters to all launches of it
        ("sampled", [("nvjet_hsh_128x256", 66, 384, 1e6), ("_chunk_scan_fwd_kernel", 512, 256, 5e6)],
         [1e6, 5e6, NAN, 5e6, 1e6]),
        # all: the k-th launch of a configuration in the report is the k-th on the timeline
        ("all", [("nvjet_hsh_128x256", 66, 384, 1e6), ("_chunk_scan_fwd_kernel", 512, 256, 5e6),
                 ("nvjet_hsh_128x256", 132, 384, 2e6), ("_chunk_scan_fwd_kernel", 512, 256, 6e6),
                 ("nvjet_hsh_128x256", 66, 384, 3e6)],
         [1e6, 5e6, 2e6, 6e6, 3e6]),
    ],
)
def test_attach_counters(mode, report_rows, expected):
    joined = conform_kernels(attach_counters(timeline(), report(report_rows), mode))
    assert joined["launch_idx"].tolist() == list(range(5))  # timeline order kept
    assert joined["dram_read_bytes"].tolist() == pytest.approx(expected, nan_ok=True)
    assert joined["l2_hit_rate_pct"].isna().all()


def test_unmatched_profiled_names_counters_the_timeline_never_ran():
    # the child autotuned _chunk_scan_fwd_kernel to 4 warps where the timeline ran 8 (256 threads)
    profiled = report([("nvjet_hsh_128x256", 66, 384, 1e6), ("_chunk_scan_fwd_kernel", 512, 128, 5e6),
                       ("nvjet_hsh_128x256", 132, 384, 2e6)])
    assert unmatched_profiled(timeline(), profiled) == ["_chunk_scan_fwd_kernel grid 512 block 128"]
    assert unmatched_profiled(timeline(), profiled.iloc[[0, 2]]) == []


@pytest.fixture
def fake_ncu(tmp_path, monkeypatch):
    """Put an `ncu` on PATH that behaves as the script given (the real messages ncu prints)."""
    def install(script: str):
        path = tmp_path / "bin" / "ncu"
        path.parent.mkdir(exist_ok=True)
        path.write_text("#!/usr/bin/env bash\n" + script)
        path.chmod(path.stat().st_mode | stat.S_IEXEC)
        monkeypatch.setenv("PATH", f"{path.parent}{os.pathsep}{os.environ['PATH']}")

    return install


EXPORT = 'while [[ $# -gt 0 ]]; do [[ $1 == --export ]] && out=$2; shift; done; '


def test_successful_run_counts_profiled_kernels(fake_ncu, tmp_path):
    fake_ncu(EXPORT + 'for k in a b c; do echo "==PROF== Profiling \\"$k\\" - 0: 0%....50%....100% - 9 passes"; '
             'done; touch "$out"')
    seen = []
    wall = run_ncu(["python"], tmp_path / "r.ncu-rep", "sampled", 30, seen.append)
    assert seen == [1, 2, 3] and wall > 0 and (tmp_path / "r.ncu-rep").exists()


@pytest.mark.parametrize(
    ("script", "timeout", "message"),
    [
        ('echo "==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance '
         'Counters on the target device 0."; exit 1', 30, PERMISSION_HINT),
        ('echo "==PROF== Connected to process 4242"; echo "RuntimeError: CUDA error: an illegal memory access"; '
         'exit 1', 30, "failed under Nsight Compute (exit 1): RuntimeError: CUDA error: an illegal memory access"),
        ("sleep 20", 0.5, "timed out after 0 s"),
        ('echo "==WARNING== No kernels were profiled."; exit 0', 30, "wrote no report (==WARNING== No kernels"),
        ('echo "==ERROR== Failed to write report: No space left on device"; exit 1', 30, "disk full"),
    ],
)
def test_failures_are_one_clear_error(fake_ncu, tmp_path, script, timeout, message):
    fake_ncu(script)
    with pytest.raises(CounterCollectionError) as error:
        run_ncu(["python"], tmp_path / "r.ncu-rep", "sampled", timeout)
    assert message in str(error.value)


def test_missing_ncu(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(CounterCollectionError, match="not on PATH"):
        run_ncu(["python"], tmp_path / "r.ncu-rep", "sampled", 30)


def test_bad_counters_option_is_one_line():
    result = CliRunner().invoke(app, ["profile", "mamba2-lm", "--preset", "tiny", "--counters", "most"])
    assert result.exit_code == 1 and "--counters must be sampled, all or none" in result.output
