"""The calls of a step that make the host wait for the GPU: counted by site (`profiler.syncs`), said as a finding
(`analysis.findings.run`)."""

import json
import traceback
import warnings
from pathlib import Path

import pytest
import torch
from known_work import typed_run_info

from ssmprof.analysis.findings.run import _syncs
from ssmprof.profiler.syncs import SYNC_WARNING, call_site, recorded_syncs, synchronizing_sites

HERE = "tests/test_syncs.py"


def _synchronizing_op():
    warnings.warn(f"{SYNC_WARNING} (as torch's debug mode words it)", UserWarning, stacklevel=1)


def _step():
    for _ in range(3):
        _synchronizing_op()
    warnings.warn("torch.get_autocast_gpu_dtype() is deprecated", FutureWarning, stacklevel=1)


def test_every_synchronizing_call_is_counted_at_its_line_and_other_warnings_are_dropped(recwarn):
    with recorded_syncs() as sites:
        _step()
    line = _synchronizing_op.__code__.co_firstlineno + 1
    assert dict(sites) == {f"{HERE}:{line} in _synchronizing_op": 3}
    assert not recwarn.list


def test_frames_inside_torch_are_passed_over_to_the_callers_line():
    torch_file = str(Path(torch.__file__).parent / "nn" / "functional.py")
    stack = [traceback.FrameSummary("/venv/lib/python3.12/site-packages/mamba_ssm/ops/ssd.py", 12, "forward"),
             traceback.FrameSummary(torch_file, 40, "softmax")]
    assert call_site(stack) == "mamba_ssm/ops/ssd.py:12 in forward"
    beside_torch = str(Path(torch.__file__).parent.parent / "torch_geometric" / "utils" / "_to_dense_batch.py")
    assert call_site([*stack, traceback.FrameSummary(beside_torch, 120, "to_dense_batch")]) == \
        "torch_geometric/utils/_to_dense_batch.py:120 in to_dense_batch"  # a package named torch_..., not torch
    assert call_site([traceback.FrameSummary(torch_file, 40, "softmax")]) == "torch"


@pytest.mark.gpu
def test_a_step_that_reads_a_value_on_the_host_synchronizes_there():
    x = torch.ones(1024, device="cuda")

    def step():
        total = (x * 2).sum().item()  # waits for the GPU
        return x[x > total / 4096]  # a boolean mask: the host needs the count

    sites = synchronizing_sites(step)
    assert sum(sites.values()) >= 2 and all(site.startswith(f"{HERE}:") for site in sites)
    assert synchronizing_sites(lambda: x * 2) == {}


@pytest.mark.parametrize(("sites", "value", "said"), [
    (None, None, None),
    ({}, None, None),
    ({"ssmprof/workloads/graph.py:177 in pack": 8}, "8 syncs a step",
     "The host waits for the GPU 8 times a step, at ssmprof/workloads/graph.py:177 in pack (8x). After each"),
    ({"a.py:1 in f": 1, "b.py:2 in g": 3, "c.py:3 in h": 1, "d.py:4 in k": 2}, "7 syncs a step",
     "The host waits for the GPU 7 times a step, at b.py:2 in g (3x); d.py:4 in k (2x); a.py:1 in f (1x); and 1 "
     "more sites."),
])
def test_the_host_finding_names_where_the_step_synchronizes(sites, value, said):
    info = typed_run_info()
    info = info.model_copy(update={"harness": info.harness.model_copy(update={"sync_sites": sites})})
    rows = _syncs(info)
    assert [row.value for row in rows] == ([value] if value else [])
    assert all(row.finding.startswith(said) for row in rows)


SITES = Path(__file__).parent / "data" / "sync-sites-h100"


def test_graph_mamba_synchronizes_twice_a_layer_in_to_dense_batch_and_mamba2_lm_never():
    from ssmprof.pipeline import reporting

    graph, lm = (reporting.analyze_runs([SITES / name])[0][0] for name in ("graph-mamba-paper", "mamba2-lm-small"))
    sites = graph.info.harness.sync_sites
    assert sum(sites.values()) == 2 * graph.info.workload.config["layers"] == 8
    assert {site.split(":")[0] for site in sites} == {"torch_geometric/utils/_to_dense_batch.py"}
    findings = graph.summary.findings.set_index("value")
    assert findings.loc["8 syncs a step", "finding"].startswith(
        "The host waits for the GPU 8 times a step, at torch_geometric/utils/_to_dense_batch.py:126 in to_dense_batch "
        "(4x); torch_geometric/utils/_to_dense_batch.py:133 in to_dense_batch (4x).")
    assert lm.info.harness.sync_sites == {} and not lm.summary.findings["value"].str.contains("sync").any()


def test_the_ranks_of_a_parallel_run_look_for_synchronizing_calls_too():
    """Two H100s, TP=2: the merged run.json holds the ranks' count (none), beside a late rank whose gaps are
    therefore not waits for its own GPU."""
    from ssmprof.analysis.step.ranks import late_rank
    from ssmprof.pipeline.loading import load_run

    run = load_run(SITES / "mamba2-lm-small-tp2")
    assert run.info.parallel is not None and run.info.parallel.tp == 2 and run.info.harness.sync_sites == {}
    late = late_rank(run.kernels, run.info).iloc[0]
    assert (late["late_rank"], round(late["cost_ms"], 1)) == (0, 51.7)


def _steps(mode: str) -> dict[str, list[float]]:
    rows = [json.loads(line) for line in (SITES / "tracer-host-cost.jsonl").read_text().splitlines()]
    by_workload: dict[str, list[float]] = {}
    for row in rows:
        if row["mode"] == mode:
            by_workload.setdefault(row["workload"], []).append(row["step_ms"])
    return by_workload


def test_a_captures_host_cost_lengthens_only_the_steps_the_host_paces():
    """docs/history.md's numbers: the step without a profiler and under the timing pass's capture, two rounds."""
    bare, timing = _steps("none"), _steps("cuda_quiet")
    for gpu_paced in ("transformer small", "mamba2-lm paper"):
        assert all(abs(t / b - 1) < 0.01 for b, t in zip(bare[gpu_paced], timing[gpu_paced], strict=True))
    assert all(t / b > 1.25 for b, t in zip(bare["graph-mamba paper"], timing["graph-mamba paper"], strict=True))
    history = " ".join((Path(__file__).parents[1] / "docs" / "history.md").read_text().split())
    for workload in ("transformer small", "mamba2-lm paper", "graph-mamba paper"):
        quoted = (f"{' and '.join(f'{v:g}' for v in bare[workload])} ms, "
                  f"{' and '.join(f'{v:g}' for v in timing[workload])} ms")
        assert quoted.replace(", ", " a step without a profiler, ", 1) in history or quoted in history, workload
