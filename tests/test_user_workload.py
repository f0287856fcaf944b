"""A workload in the user's own file or module (`workloads.user`), run from a folder outside the repository:
examples/custom_hybrid.py copied there trains at preset tiny on the CPU, travels by its absolute spec to the
counter child and the ranks, records its file and sha256 in run.json, and every kind of bad user code is one
line naming the user's file and line, exit 1, nothing written."""

import hashlib
import json
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from ssmprof import schema
from ssmprof.cli import app
from ssmprof.errors import UserCodeFailed, UserWorkloadInvalid
from ssmprof.kernels import plan_kernels
from ssmprof.pipeline import measure
from ssmprof.profiler import ncu_child
from ssmprof.profiler.profile_run import run_info
from ssmprof.workloads import user
from ssmprof.workloads.registry import get_workload

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "custom_hybrid.py"
runner = CliRunner()
FAST = ["--preset", "tiny", "--device", "cpu", "--steps", "1", "--warmup", "0", "--layers", "2"]


@pytest.fixture
def model_file(tmp_path):
    """The example, copied to a folder outside the repository."""
    path = tmp_path / "my_model.py"
    path.write_text(EXAMPLE.read_text())
    return path


def test_run_a_file_outside_the_repository(model_file, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "result.json"
    result = runner.invoke(app, ["run", "my_model.py:CustomHybrid", *FAST, "--json", str(out)])
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert data["workload"] == "custom-hybrid" and data["items_per_step"] == 2 * 64
    assert data["provenance"]["ssd"].startswith("torch-reference")
    source = data["workload_source"]
    assert source["spec"] == f"{model_file}:CustomHybrid" and source["file"] == str(model_file)
    assert source["sha256"] == hashlib.sha256(model_file.read_bytes()).hexdigest()


def test_run_json_records_where_the_workload_came_from(model_file):
    result = measure.train(measure.WorkloadOptions(f"{model_file}:CustomHybrid", "tiny", warmup=0, layers=2),
                           "cpu", steps=1)
    result.gpu = {"name": "cpu"}  # a run directory's run.json names its GPU; the CPU run says cpu, as sweeps do
    workload = run_info(result, {}, {}, pd.DataFrame(columns=["duration_ns", "phase", "ncu_duration_ns"]), {}).workload
    assert workload.source is not None
    assert workload.source.file == str(model_file) and workload.source.module is None
    assert workload.source.sha256 == hashlib.sha256(model_file.read_bytes()).hexdigest()


def test_a_report_says_where_the_workload_came_from():
    from known_work import typed_run_info

    from ssmprof.analysis.findings.run import provenance

    source = {"spec": "/home/me/my_model.py:CustomHybrid", "file": "/home/me/my_model.py", "sha256": "ab" * 32}
    info = typed_run_info(workload={"name": "custom-hybrid", "preset": "small", "config": {}, "source": source})
    rows = dict(provenance(info, "run directory x").itertuples(index=False))
    assert rows["workload"] == "custom-hybrid --preset small, from /home/me/my_model.py:CustomHybrid (sha256 " \
                               "abababababab)"


def test_module_name(tmp_path, monkeypatch):
    package = tmp_path / "my_models"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "hybrid.py").write_text(EXAMPLE.read_text())
    monkeypatch.syspath_prepend(str(tmp_path))
    workload = get_workload("my_models.hybrid:CustomHybrid")
    assert workload.spec == "my_models.hybrid:CustomHybrid"
    assert workload.source["module"] == "my_models.hybrid" and workload.source["file"] == str(package / "hybrid.py")
    result = measure.train(measure.WorkloadOptions(workload.spec, "tiny", warmup=0, layers=2), "cpu", steps=1)
    assert result.workload == "custom-hybrid" and result.final_loss > 0


def test_profile_resolves_it_before_asking_for_a_gpu(model_file, tmp_path):
    result = runner.invoke(app, ["profile", f"{model_file}:CustomHybrid", "--preset", "tiny", "--device", "cpu",
                                 "--out", str(tmp_path / "runs")])
    assert result.exit_code == 1 and "profiling characterizes GPU kernels" in result.output
    assert not (tmp_path / "runs").exists()


def test_the_counter_child_and_the_ranks_get_the_absolute_spec(model_file, tmp_path, monkeypatch):
    """A relative spec given in one folder loads in a child started in another: the child's argv and a rank's
    job carry the absolute path. (The child runs on the CPU here, its kernel plan made for the CPU.)"""
    monkeypatch.chdir(tmp_path)
    ready = measure.prepare(measure.WorkloadOptions("my_model.py:CustomHybrid", "tiny", warmup=0, layers=2), "cpu")
    assert measure.rank_job(ready, measure.WorkloadOptions("x"), 1, "train").workload == f"{model_file}:CustomHybrid"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    monkeypatch.setattr(ncu_child, "plan_kernels", lambda ops, device, *args: plan_kernels(ops, "cpu"))
    timings = tmp_path / "timings.json"
    argv = [ready.workload.spec, "tiny", json.dumps(ready.overrides), "0", "--timings", str(timings)]
    assert ncu_child.main(argv) == 0
    assert schema.read_document(schema.PassRecord, timings).work["config"]["layers"] == 2


def test_suite_and_sweep_take_it(model_file, monkeypatch):
    """A sweep's points are run directories named by the workload's name, not its path; the suite resolves the
    spec before it asks for a GPU."""
    from ssmprof.pipeline import sweep

    _, planned = sweep.plan(sweep.SweepSpec([f"{model_file}:CustomHybrid"], "tiny", ["seq_len=32,64"]), "cpu")
    assert [sweep.run_name(p.point) for p in planned] == ["custom-hybrid_seq_len-32", "custom-hybrid_seq_len-64"]
    result = runner.invoke(app, ["suite", "--workloads", f"{model_file}:Nope", "--out", str(model_file.parent)])
    assert result.exit_code == 1 and f"error: {model_file}: has no 'Nope'" in result.output


def _spoiled(old: str, new: str) -> str:
    text = EXAMPLE.read_text()
    assert old in text
    return text.replace(old, new, 1)


def _line_of(text: str, marker: str) -> int:
    return next(number for number, line in enumerate(text.splitlines(), 1) if marker in line)


LOSS = "        logits = model(batch[\"input_ids\"])"
BACKWARD_FAILS = _spoiled(LOSS, "        logits = Refuses.apply(model(batch[\"input_ids\"]))").replace(
    "import dataclasses\n", "import dataclasses\n\nimport torch\n\n\nclass Refuses(torch.autograd.Function):\n"
    "    forward = staticmethod(lambda ctx, x: x.clone())\n\n    @staticmethod\n    def backward(ctx, grad):\n"
    "        raise ValueError('no backward')  # HERE\n", 1)
BAD_CODE = [
    # (case, file text, the workload's name in the file, what the line says, the marker of the line it names)
    ("an import error", _spoiled("import dataclasses", "import dataclasses\nimport no_such_module_here  # HERE"),
     "CustomHybrid", "ModuleNotFoundError: No module named 'no_such_module_here' (importing it)", "# HERE"),
    ("a syntax error", _spoiled("    unit = \"tokens\"", "    unit = \"tokens\" +  # HERE"), "CustomHybrid",
     "SyntaxError", "# HERE"),
    ("an exception at import", _spoiled("import dataclasses", "import dataclasses\nraise SystemExit(2)  # HERE"),
     "CustomHybrid", "SystemExit: 2 (importing it)", "# HERE"),
    ("the name is missing", EXAMPLE.read_text(), "Nope", "has no 'Nope' (its Workload classes: CustomHybrid)",
     None),
    ("the name is not a workload", EXAMPLE.read_text(), "CustomHybridConfig",
     "'CustomHybridConfig' is a class, not an ssmprof Workload", "@dataclasses.dataclass"),
    ("a method is missing", _spoiled("    def loss(self, model, batch):", "    def loss_(self, model, batch):"),
     "CustomHybrid", "CustomHybrid does not define loss", "class CustomHybrid(Workload)"),
    ("an op ssmprof does not know", _spoiled("ops = (\"ssd\",", "ops = (\"flash\", \"ssd\","), "CustomHybrid",
     "CustomHybrid.ops must be a tuple of kernel ops", "class CustomHybrid(Workload)"),
    ("a suite workload's name", _spoiled("name = \"custom-hybrid\"", "name = \"mamba2-lm\""), "CustomHybrid",
     "name 'mamba2-lm' is a workload of the suite's", "class CustomHybrid(Workload)"),
    ("config returns a dict", _spoiled("    def build(self, cfg, plan):",
                                       "    def config(self, preset, overrides=None):\n        return {}\n\n"
                                       "    def build(self, cfg, plan):"),
     "CustomHybrid", "custom-hybrid.config returned a dict, not a CommonConfig", "def config("),
    ("batch returns a list", _spoiled("generator)\n", "generator), 1\n"), "CustomHybrid",
     "custom-hybrid.batch returned a tuple, not a dict", "def batch("),
    ("loss returns a vector", _spoiled("logits.flatten(0, 1).float(), batch[\"labels\"].flatten())",
                                       "logits.flatten(0, 1).float(), batch[\"labels\"].flatten(), "
                                       "reduction=\"none\")"),
     "CustomHybrid", "custom-hybrid.loss returned a tensor of shape (128,)", "def loss("),
    ("loss needs no gradient", _spoiled(LOSS, LOSS + "\n        return logits.detach().sum()"), "CustomHybrid",
     "custom-hybrid.loss returned a tensor that needs no gradient", "def loss("),
    ("an exception inside build", _spoiled("        return CausalLM(", "        raise ValueError('no')  # HERE\n"
                                           "        return CausalLM("),
     "CustomHybrid", "ValueError: no (in custom-hybrid.build)", "# HERE"),
    ("an exception inside the training step", _spoiled(LOSS, LOSS + "\n        if not logits.is_meta:\n"
                                                       "            logits = logits @ logits  # HERE"),
     "CustomHybrid", "RuntimeError: ", "# HERE"),
    ("an exception in backward", BACKWARD_FAILS, "CustomHybrid",
     "ValueError: no backward (in custom-hybrid's training step)", "# HERE"),
]


@pytest.mark.parametrize(("case", "text", "name", "says", "marker"), BAD_CODE, ids=[row[0] for row in BAD_CODE])
def test_bad_user_code_is_one_line_naming_its_file_and_line(tmp_path, case, text, name, says, marker):
    path = tmp_path / "my_model.py"
    path.write_text(text)
    out = tmp_path / "result.json"
    result = runner.invoke(app, ["run", f"{path}:{name}", *FAST, "--json", str(out)])
    assert result.exit_code == 1, result.output
    line = result.output.strip()
    assert len(line.splitlines()) == 1 and "Traceback" not in line
    where = f"{path}:{_line_of(text, marker)}:" if marker else f"{path}:"
    assert f"error: {where}" in line
    if says:
        assert says in line
    assert not out.exists()


def test_no_such_file(tmp_path):
    with pytest.raises(UserWorkloadInvalid, match="no such file"):
        get_workload(f"{tmp_path}/absent.py:Model")


def test_no_such_module():
    with pytest.raises(UserWorkloadInvalid, match="no module 'no_such_package_here.models'"):
        get_workload("no_such_package_here.models:Model")


def test_a_user_exception_keeps_its_cause(tmp_path):
    path = tmp_path / "my_model.py"
    path.write_text(_spoiled("        return CausalLM(", "        raise KeyError('d_model')\n        return CausalLM("))
    workload = get_workload(f"{path}:CustomHybrid")
    with pytest.raises(UserCodeFailed) as raised:
        workload.build(workload.config("tiny"), plan_kernels(workload.kernel_ops(workload.config("tiny")), "cpu"))
    assert isinstance(raised.value.__cause__, KeyError)


def test_the_guide_shows_the_example_in_full():
    example = EXAMPLE.read_text()
    assert example in (EXAMPLE.parents[1] / "docs" / "own-model.md").read_text()
    assert len(example.splitlines()) <= 50


def test_the_ssd_model_needs_every_mamba2_setting(model_file):
    """The example's config (a Mamba2Config) gets the analytic SSD model; one lacking a setting gets none, not a
    KeyError in its report."""
    from dataclasses import asdict

    from ssmprof.analysis.limits.analytic_work import forward_model

    config = asdict(get_workload(f"{model_file}:CustomHybrid").config("small"))
    assert forward_model(config) is not None
    assert forward_model({key: value for key, value in config.items() if key != "expand"}) is None


def test_suite_names_hold_no_colon():
    """`is_user_spec` tells a user's spec from a suite name by its colon alone."""
    from ssmprof.workloads.registry import WORKLOADS

    assert not any(user.is_user_spec(name) for name in WORKLOADS)
