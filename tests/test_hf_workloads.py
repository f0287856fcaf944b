"""The transformers hybrids (`hf:<arch>`): each trains at `tiny` on the CPU through `ssmprof run`, on transformers'
PyTorch fallback, and says so in its provenance; the names and the missing classes are one line."""

import json
import math
import sys

import pytest
from typer.testing import CliRunner

from ssmprof.cli import app
from ssmprof.errors import KernelUnavailable, UnknownWorkload
from ssmprof.kernels import mamba_ssm, plan_kernels
from ssmprof.workloads import hf
from ssmprof.workloads.registry import get_workload

runner = CliRunner()


@pytest.mark.parametrize("name", sorted(hf.WORKLOADS))
def test_tiny_run_on_cpu_is_finite_and_says_pytorch_fallback(name, tmp_path):
    out = tmp_path / "result.json"
    result = runner.invoke(app, ["run", name, "--preset", "tiny", "--device", "cpu", "--steps", "1", "--warmup", "0",
                                 "--seq-len", "32", "--json", str(out)])
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert math.isfinite(data["final_loss"]) and abs(data["final_loss"] - math.log(256)) < 1.0
    mixer_ops = [op for op, _ in hf.BOUND[get_workload(name).arch.family]]
    for op in mixer_ops:
        assert data["provenance"][op].startswith(hf.FALLBACK), data["provenance"]


def test_cpu_build_hides_mamba_ssm_imported_earlier():
    """An earlier import of mamba-ssm (the kernel adapter makes it importable on the CPU) must not make transformers
    bind its Triton kernels, which cannot run on the CPU: the modeling module is imported again with it hidden."""
    mamba_ssm()
    assert "mamba_ssm" in sys.modules
    workload = get_workload("hf:mamba2")
    cfg = workload.config("tiny")
    plan = plan_kernels(workload.ops, "cpu")
    workload.build(cfg, plan)
    assert plan.choices["ssd"].describe().startswith(hf.FALLBACK)
    assert sys.modules["mamba_ssm"] is not None  # put back as it was


def test_workloads_lists_the_transformers_models():
    result = runner.invoke(app, ["workloads"])
    assert result.exit_code == 0
    for name in hf.WORKLOADS:
        assert name in result.output
    assert "published" in result.output


def test_unknown_transformers_model_is_one_line_with_the_choices():
    with pytest.raises(UnknownWorkload, match="choose from: hf:mamba, hf:mamba2"):
        get_workload("hf:foo")
    result = runner.invoke(app, ["run", "hf:foo", "--preset", "tiny", "--device", "cpu"])
    assert result.exit_code == 1 and "hf:nemotron-h" in result.output and "Traceback" not in result.output


def test_transformers_without_the_class_is_one_line(monkeypatch):
    arch = hf.ARCHS[0]
    missing = hf.Arch(**{**arch.__dict__, "module": "no_such_model", "model_class": "NoSuchForCausalLM"})
    workload = hf.HFWorkload(missing)
    with pytest.raises(KernelUnavailable, match=r"transformers \S+ has no NoSuchForCausalLM .*needs? >= 5\.24\.0"):
        workload.build(workload.config("tiny"), plan_kernels(workload.ops, "cpu"))


@pytest.mark.parametrize(("overrides", "message"), [
    ({"experts": "4"}, "hf:mamba2 has no setting 'experts'"),
    ({"headdim": "32"}, "ssm_heads x headdim must be 2 x d_model"),
])
def test_sizes_the_architecture_cannot_take_are_refused(overrides, message):
    from ssmprof.errors import InvalidConfig

    with pytest.raises(InvalidConfig, match=message):
        get_workload("hf:mamba2").config("tiny", overrides)


@pytest.mark.parametrize(("published", "layers", "pattern"), [
    (hf.NEMOTRON_H_PATTERN, 9, "M-M-M-M*-"),  # the published prefix holds every kind
    (hf.NEMOTRON_H_PATTERN, 4, "M-M*"),  # attention takes the last layer
    (hf.BAMBA_PATTERN, 3, "MMA"),
    (hf.QWEN3_NEXT_PATTERN, 8, "LLLALLLA"),
])
def test_reduced_layer_pattern_keeps_every_layer_kind(published, layers, pattern):
    assert hf._pattern(published, layers) == pattern


@pytest.mark.parametrize(("run", "provenance", "contradicted"), [
    ("mamba2-lm", None, []),  # the bundled H100 run as recorded: fused SSD and conv, both in its timeline
    ("mamba2-lm", {"ssd": "PyTorch fallback (transformers' own PyTorch code)"}, ["ssd"]),
    ("transformer", {"ssd": "mamba_ssm fused (transformers Mamba2ForCausalLM calls ...)"}, ["ssd"]),
    ("transformer", {"ssd": "PyTorch fallback (CPU run)", "conv1d": "torch-conv1d"}, []),
])
def test_provenance_is_checked_against_the_timeline(run, provenance, contradicted):
    """A GPU report says where the recorded provenance and the kernels the timeline saw disagree."""
    from ssmprof import bundled
    from ssmprof.analysis.trust.provenance import provenance_mismatches
    from ssmprof.pipeline.loading import load_run

    loaded = load_run(next(p for p in bundled.runs("h100-sxm") if p.name == run))
    notes = provenance_mismatches(provenance or loaded.info.provenance, loaded.kernels["kernel_name"], True)
    assert [note.split(" ran ")[0].rsplit(" ", 1)[-1] for note in notes] == contradicted
    assert provenance_mismatches(provenance or loaded.info.provenance, loaded.kernels["kernel_name"], False) == []


def test_cpu_fallback_line_names_the_real_cause_not_a_missing_package():
    """On the CPU ssmprof hides mamba-ssm from transformers' import on purpose; transformers then printed "because
    `mamba_ssm` is not installed" while `ssmprof doctor` lists it. The line says it is a CPU run instead."""
    import logging

    import torch
    from transformers.utils import logging as hf_logging

    workload = get_workload("hf:mamba")
    cfg = workload.config("tiny", {"seq_len": 16})
    model = workload.build(cfg, plan_kernels(workload.ops, "cpu"))
    lines: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: lines.append(record.getMessage())  # type: ignore[method-assign]
    logger = logging.getLogger("transformers")
    logger.addHandler(handler)
    hf_logging.warning_once.cache_clear()  # transformers says it once a process: say it again here
    try:
        batch = workload.batch(cfg, torch.device("cpu"), torch.Generator().manual_seed(0))
        workload.loss(model, batch).backward()
    finally:
        logger.removeHandler(handler)
    fallback = [line for line in lines if "is falling back" in line]
    assert fallback, lines
    for line in fallback:
        assert "is not installed. This is correct" not in line and "CPU run" in line, line


def test_jambas_scan_norms_give_the_scan_its_inputs_dtype_under_mixed_precision():
    """Jamba's time-step, B and C RMSNorms keep an fp32 weight (mixed precision) and so turn bf16 into fp32 under
    autocast, which mamba-ssm's selective scan refuses (B must be its input's dtype): their outputs are cast to the
    autocast dtype; the other norms, and everything outside autocast, are left as transformers computes them."""
    import torch

    workload = get_workload("hf:jamba")
    cfg = workload.config("tiny")
    model = workload.build(cfg, plan_kernels(workload.ops, "cpu"))
    seen: dict[str, torch.dtype] = {}
    for name, module in model.named_modules():
        if name.endswith("layernorm"):
            module.register_forward_hook(lambda m, i, o, name=name: seen.__setitem__(name, o.dtype))
    tokens = torch.randint(0, cfg.vocab_size, (1, 16))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        model(input_ids=tokens, use_cache=False)
    scan = {name: dtype for name, dtype in seen.items() if name.rsplit(".", 1)[-1] in hf.JAMBA_SCAN_NORMS}
    assert scan and set(scan.values()) == {torch.bfloat16}
    assert {dtype for name, dtype in seen.items() if name not in scan} == {torch.float32}  # e.g. input_layernorm
    model(input_ids=tokens, use_cache=False)
    assert set(seen.values()) == {torch.float32}
