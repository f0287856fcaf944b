"""The ncu cost experiment (scripts/ncu_pass_cost.py) asks about every metric of the counter set once."""

import sys
from pathlib import Path

from ssmprof.profiler.ncu_argv import counter_metrics

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
                                                       *cut["tensor ops"], *split, *cut["l2 (lts)"],
                                                       *cut["instructions and shared memory"]]
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
    bounds = cut["instructions and shared memory"]
    assert len(bounds) == 5
    assert sorted(cut["whole set without the instruction-bound family"] + bounds) == sorted(metrics)
    narrowest = cut["whole set without the pipes family and the fp16 tensor metric"]
    assert sorted(narrowest + pipes + fp16) == sorted(metrics)


DATA = Path(__file__).parent / "data"
H100_BYTES = 85017493504  # run.json's gpu.memory_bytes of the H100 runs


def test_replay_through_the_host_is_predicted_from_what_the_process_holds():
    """Against what was measured: the H100 holds (30 GiB fitted, 45 GiB took 12x as long), every bundled run (all
    finished their passes: none through the host by their largest saved GiB), and mamba3-lm's paper peak (49 GiB on
    the H200) on the H100, whose first pass did not finish in 270 s."""
    import ast
    import json

    from ssmprof import bundled
    from ssmprof.profiler.counters import replay_through_host

    log = (DATA / "ncu-pass-cost-h100" / "ncu-pass-cost.log").read_text()
    holds = {line.split(" GiB more")[0].rsplit(" ", 1)[1]: ast.literal_eval(line[line.index("{"):])
             for line in log.splitlines() if "GiB more" in line}
    assert {gib: replay_through_host(h["gib_per_pass"] * 2**30, H100_BYTES) for gib, h in holds.items()} == \
        {"0": False, "30": False, "45": True}
    runs = [json.loads((path / "run.json").read_text()) for gpu in bundled.GPUS for path in bundled.runs(gpu)]
    largest = [(max(p["gib_per_pass_max"] for p in run["collectors"]["counters"]["pass_replay"]),
                run["gpu"]["memory_bytes"]) for run in runs if run["collectors"]["counters"].get("pass_replay")]
    assert len(largest) >= 12 and not any(replay_through_host(gib * 2**30, gpu) for gib, gpu in largest)
    mamba3 = next(run for run in runs if run["workload"]["name"] == "mamba3-lm" and "H200" in run["gpu"]["name"])
    assert replay_through_host(mamba3["harness"]["peak_memory_bytes"], H100_BYTES)
    assert not replay_through_host(mamba3["harness"]["peak_memory_bytes"], mamba3["gpu"]["memory_bytes"])
