"""The ncu cost experiment (scripts/ncu_pass_cost.py) asks about every metric of the counter set once."""

import sys
from pathlib import Path

from ssmprof.profiler.ncu import counter_metrics

sys.path.insert(0, str(Path(__file__).parent.parent / "scripts"))
import ncu_pass_cost  # noqa: E402


def test_metric_families_cut_the_counter_set_without_overlap():
    metrics = ncu_pass_cost.MEASURED_SET
    assert metrics == [*counter_metrics("gh100"), "sm__ops_path_tensor_src_fp16.sum"]
    cut = ncu_pass_cost.families(metrics)
    parts = [m for name, family in cut.items() if not name.startswith(("whole", "stall", "alone")) for m in family]
    assert sorted(parts) == sorted(metrics)
    alone = [family for name, family in cut.items() if name.startswith("alone")]
    split = ["sm__ops_path_tensor_op_hgmma_src_fp16.sum", "sm__ops_path_tensor_op_hmma_src_fp16.sum"]
    assert [m for family in alone for m in family] == [*cut["pipes, issue, warps"], ncu_pass_cost.DROPPED,
                                                       *cut["tensor ops"], *split, *cut["l2 (lts)"]]
    fp16_split = cut["whole set, fp16 as its wgmma and mma.sync parts"]
    assert set(fp16_split) == set(metrics) - {"sm__ops_path_tensor_src_fp16.sum"} | set(split)
    assert ncu_pass_cost.DROPPED not in metrics
    pipes = cut["pipes, issue, warps"]
    assert sorted(cut["whole set without the pipes family"] + pipes) == sorted(metrics)
    assert cut["stall set with the pipes family"][-len(pipes):] == pipes
    assert len(cut["whole set without sass instructions"]) == len(metrics) - 9
    assert cut["stall set"] == counter_metrics("gh100", "stalls")
    merged = cut["whole set and the stall set in one pass"]
    assert set(merged) == set(metrics) | set(cut["stall set"]) and len(merged) == len(set(merged))
    fp16 = ["sm__ops_path_tensor_src_fp16.sum"]
    assert sorted(cut["whole set without the fp16 tensor metric"] + fp16) == sorted(metrics)
    narrowest = cut["whole set without the pipes family and the fp16 tensor metric"]
    assert sorted(narrowest + pipes + fp16) == sorted(metrics)
