"""Calibration checks: what passes, what fails, and the no-GPU path."""

import pandas as pd
import pytest
import torch
from typer.testing import CliRunner

from ssmprof.analysis.trust.calibration import evaluate
from ssmprof.cli import app
from ssmprof.profiler.calibrate import (
    COPY_BYTES,
    FMA_ELEMENTS,
    FMA_ITERS,
    GEMM_MNK,
    KNOWN_WORK,
    L1_BLOCK,
    L1_CHECK_ITERS,
    L1_CHECK_PROGRAMS,
    L2_CHECK_ITERS,
    L2_CHECK_PROGRAMS,
)

GEMM_FLOPS = 2.0 * GEMM_MNK[0] * GEMM_MNK[1] * GEMM_MNK[2]
FMA_FLOPS = 2.0 * FMA_ELEMENTS * FMA_ITERS
L1_BYTES = 4.0 * L1_CHECK_PROGRAMS * L1_BLOCK * (L1_CHECK_ITERS + 1)
L2_READ_BYTES = 4.0 * L2_CHECK_PROGRAMS * L1_BLOCK * (L2_CHECK_ITERS + 1)


def report(tensor_ops=GEMM_FLOPS, ffma=FMA_FLOPS / 2, dram=2.0 * COPY_BYTES, gemm="nvjet_hsh_256x128_64x4_2x1_v",
           l1=L1_BYTES, l2=L2_READ_BYTES):
    nan = float("nan")
    rows = [
        {"kernel_name": gemm, "tensor_ops_bf16": tensor_ops, "inst_fadd": 0, "inst_fmul": 0, "inst_ffma": 0,
         "dram_read_bytes": 1e8, "dram_write_bytes": 3e7},
        {"kernel_name": "fma_chain", "tensor_ops_bf16": 0, "inst_fadd": 0, "inst_fmul": 0, "inst_ffma": ffma,
         "dram_read_bytes": 6.7e7, "dram_write_bytes": 6.7e7},
        {"kernel_name": "vectorized_elementwise_kernel", "tensor_ops_bf16": 0, "inst_fadd": nan, "inst_fmul": nan,
         "inst_ffma": nan, "dram_read_bytes": dram / 2, "dram_write_bytes": dram / 2},
        {"kernel_name": "l1_read", "tensor_ops_bf16": 0, "l1_bytes": l1},
        {"kernel_name": "l2_read", "tensor_ops_bf16": 0, "l1_bytes": l2},
    ]
    return pd.DataFrame(rows)


@pytest.mark.parametrize(
    ("frame", "passed"),
    [
        (report(), [True, True, True, True, True]),
        (report(tensor_ops=GEMM_FLOPS / 2), [False, True, True, True, True]),  # counting FMAs instead of FLOPs
        (report(tensor_ops=GEMM_FLOPS * 1.009), [True, True, True, True, True]),
        (report(ffma=FMA_FLOPS / 2 * 1.02), [True, False, True, True, True]),
        (report(dram=2.0 * COPY_BYTES * 1.019), [True, True, True, True, True]),
        (report(dram=2.0 * COPY_BYTES * 1.05), [True, True, False, True, True]),
        (report(gemm="some_other_kernel"), [False, True, True, True, True]),  # the GEMM was not found in the report
        # the first L1 kernel on the H100: loads hoisted out of its loop, 145 GB/s of L1 traffic counted
        (report(l1=L1_BYTES / 46), [True, True, True, False, True]),
        # a private-block L2 kernel on the H100: the compiler folded its loop to 5 loads a program of 257 blocks
        (report(l2=L2_READ_BYTES * 6 / 257), [True, True, True, True, False]),
    ],
)
def test_checks(frame, passed):
    result = evaluate(frame, KNOWN_WORK)
    assert result["passed"].tolist() == passed
    assert result["check"].tolist() == ["tensor FLOPs (bf16 GEMM)", "vector FLOPs (fp32 FMA chain)",
                                        "DRAM bytes (copy kernel)", "L1 bytes (L1 read kernel)",
                                        "L1 bytes (L2 read kernel)"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU message")
def test_calibrate_without_gpu(tmp_path):
    result = CliRunner().invoke(app, ["calibrate", "--out", str(tmp_path / "d.json")])
    assert result.exit_code == 1 and "no CUDA GPU" in result.output and "Traceback" not in result.output
    assert not (tmp_path / "d.json").exists()


@pytest.mark.parametrize(("scenario", "l1", "kept", "noted"), [
    # the first L1 kernel on the H100 (2026-11-23): 3,205 GB/s against an L2 ceiling of 4,644
    ("an L1 read slower than L2 is not an L1 ceiling", 3204.7, None, True),
    ("an L1 read above L2 is kept", 20000.0, 20000.0, False),
    ("a profile without an L1 ceiling stays without", None, None, False),
])
def test_an_l1_ceiling_must_be_above_the_l2_ceiling(scenario, l1, kept, noted):
    from ssmprof.analysis.trust.calibration import ordered_ceilings

    ceilings, note = ordered_ceilings({"dram_gb_s": 2963.1, "l2_gb_s": 4643.6, "l1_gb_s": l1})
    assert ceilings["l1_gb_s"] == kept and ceilings["l2_gb_s"] == 4643.6, scenario
    assert (note is not None) == noted and (not noted or "4,644 GB/s" in note), scenario


@pytest.mark.parametrize(("scenario", "counted", "timed", "expected", "set_by"), [
    ("counters faster: their rate, their kernel",
     {"dram_gb_s": (3260.0, "fill")}, {"dram_gb_s": 2960.0}, 3260.0, "Nsight Compute: fill"),
    ("events faster where the units agree: theirs",
     {"bf16_tensor_tflops": (775.7, "nvjet")}, {"bf16_tensor_tflops": 790.0}, 790.0, "CUDA events"),
    ("L2 from the counters alone: events count the bytes L1 asks for",
     {"l2_gb_s": (7749.5, "l2_read")}, {"l2_gb_s": 8525.0}, 7749.5, "Nsight Compute: l2_read"),
])
def test_each_ceiling_is_the_faster_collector_in_the_rooflines_units(scenario, counted, timed, expected, set_by):
    from ssmprof.analysis.trust.calibration import combined_ceilings

    ceilings, by = combined_ceilings(counted, timed)
    field = next(iter(counted))
    assert (ceilings[field], by[field]) == (expected, set_by), scenario
