"""Counter passes spread over identical GPUs of a host: each pass's child on its own GPU (CUDA_VISIBLE_DEVICES),
the GPUs chosen of one model, and the self-check that the passes ran the same work (`counters.check_same_work`),
with Nsight Compute faked by a script on PATH that runs as the real one would: it writes the report, and the
child's record (`schema.PassRecord`) as `profiler.ncu_child --timings` writes it."""

import json
import os
import stat

import pytest
import torch

from ssmprof import schema
from ssmprof.profiler import profile_run
from ssmprof.profiler.counters import CounterCollectionError, check_same_work

WORK = {"gpu": "NVIDIA H100 80GB HBM3", "config": {"seq_len": 64, "d_state": 16}, "provenance": {"ssd": "mamba_ssm"},
        "loss": 9.7}


@pytest.fixture
def fake_ncu(tmp_path, monkeypatch):
    """An `ncu` that records the GPU its child was given and writes the report and the child's record (the
    work of every pass as WORK, its loss times `LOSS_SCALE_<device>` where that is set)."""
    record = {**WORK, "loss": "LOSS"}
    script = f"""#!/usr/bin/env bash
while [[ $# -gt 0 ]]; do [[ $1 == --export ]] && out=$2; [[ $1 == --timings ]] && timings=$2; shift; done
echo "$CUDA_VISIBLE_DEVICES" > "$out.device"
scale_var=LOSS_SCALE_$CUDA_VISIBLE_DEVICES; loss=$(python3 -c "print(9.7 * float('${{!scale_var:-1}}'))")
stamps='{{"began": 1, "went": 1, "cuda_ready": 2, "planned": 3, "pinned": 4, "ended": 5}}'
work='{json.dumps(record)}'
echo "{{\\"version\\": 1, \\"stamps\\": $stamps, \\"work\\": ${{work/\\"LOSS\\"/$loss}}}}" > "$timings"
echo "==PROF== Profiling \\"k\\" - 0: 0%....50%....100% - 9 passes"
touch "$out"
"""
    path = tmp_path / "bin" / "ncu"
    path.parent.mkdir()
    path.write_text(script)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{path.parent}{os.pathsep}{os.environ['PATH']}")


def run_passes(tmp_path, devices: list[str], count: int = 3) -> profile_run.ChildPasses:
    passes = profile_run.ChildPasses(["python", "-m", "ssmprof.profiler.ncu_child"], 30, devices)
    reports = [tmp_path / f"counters-{number}.ncu-rep" for number in range(1, count + 1)]
    started = [passes.start(report, "sampled", ["m"], None, None, False) for report in reports]
    assert all(p.finish(lambda done: None) > 0 for p in started)
    return passes


def test_each_pass_runs_on_its_own_gpu_in_turn_and_the_passes_agree(fake_ncu, tmp_path):
    passes = run_passes(tmp_path, ["2", "3"])
    devices = [(tmp_path / f"counters-{n}.ncu-rep.device").read_text().strip() for n in (1, 2, 3)]
    assert devices == ["2", "3", "2"]
    assert len(passes.phases) == 3 and passes.phases[0]["cuda"] == 1
    agreed = check_same_work(passes.works)
    assert (agreed["passes"], agreed["gpu"], agreed["same"], agreed["loss_spread"]) == (3, WORK["gpu"], True, 0.0)


def test_passes_on_this_processs_gpu_keep_its_environment(fake_ncu, tmp_path, monkeypatch):
    """One GPU (the default): no pass is moved; each child sees what this process sees."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "7")
    run_passes(tmp_path, [], count=2)
    assert [(tmp_path / f"counters-{n}.ncu-rep.device").read_text().strip() for n in (1, 2)] == ["7", "7"]


@pytest.mark.parametrize(("scale", "message"), [
    ("1.0000001", None),  # a last-bit difference of atomics: the same iteration
    ("1.01", "first losses differ by 1.0e-02"),
])
def test_passes_whose_losses_differ_did_not_replay_the_same_iteration(fake_ncu, tmp_path, monkeypatch, scale,
                                                                      message):
    monkeypatch.setenv("LOSS_SCALE_1", scale)
    passes = run_passes(tmp_path, ["0", "1"], count=2)
    if message is None:
        assert check_same_work(passes.works)["same"]
        return
    with pytest.raises(CounterCollectionError, match=message):
        check_same_work(passes.works)


def test_passes_that_start_alike_agree_though_their_profiled_losses_drift():
    """The profiled step's losses apart by as much as mamba1-lm paper's were on an H100 (3.8e-03, after two AdamW
    updates over the selective scan's atomic backward) while the first losses agree: recorded, not refused."""
    works = [{**WORK, "first_loss": 10.8731, "loss": loss} for loss in (9.6602, 9.6970, 9.6601)]
    agreed = check_same_work(works)
    assert agreed["same"] and agreed["first_loss_spread"] == 0.0
    assert agreed["loss_spread"] == pytest.approx(3.8e-3, abs=1e-4)


@pytest.mark.parametrize("field", ["gpu", "config", "provenance"], ids=["model", "config", "kernels"])
def test_passes_on_other_hardware_or_with_other_kernels_are_not_joined(field):
    other = {**WORK, field: "something else"}
    with pytest.raises(CounterCollectionError, match=f"counter pass 2 ran other work than pass 1 \\({field} differs"):
        check_same_work([WORK, other, WORK])


def test_a_scripts_passes_agree_without_a_loss_and_differ_on_the_gpu():
    """A user script's passes record no loss (`script_child`): the same GPU and config is the whole check."""
    script_work = {"gpu": WORK["gpu"], "config": {"script": "train.py", "args": []}}
    assert check_same_work([script_work, script_work]) == {"passes": 2, "gpu": WORK["gpu"], "same": True}
    with pytest.raises(CounterCollectionError, match="counter pass 2 ran other work than pass 1 \\(gpu differs"):
        check_same_work([script_work, {**script_work, "gpu": "NVIDIA A100"}])


@pytest.mark.parametrize(("count", "visible", "names", "expected"), [
    (1, "0,1", ["H100", "H100"], []),  # the default: every pass on this process's GPU
    (0, "2,3,5", ["H100", "H100", "A100"], ["2", "3"]),  # all of the first GPU's model
    (2, None, ["H200", "H200", "H200", "H200"], ["0", "1"]),
])
def test_passes_spread_over_visible_gpus_of_one_model(monkeypatch, count, visible, names, expected):
    if visible is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: len(names))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda index=0: names[index])
    assert profile_run.identical_gpus(count) == expected


def test_a_pass_record_is_a_contract_document(tmp_path):
    record = schema.make_document(schema.PassRecord, stamps={"began": 1.0}, work=WORK)
    assert schema.read_document(schema.PassRecord, schema.write_document(record, tmp_path / "t.json")) == record
