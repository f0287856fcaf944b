"""The host sampler never costs a run (#56, bad input): a sampling thread that fails leaves the steps to run
unsampled and the run says why in its host finding; a script that forks inside its step (a worker, a data loader)
profiles as before, its child neither sampled nor stalled by the sampler's lock."""

import os
import subprocess
import sys

import ssmprof
from ssmprof import schema
from ssmprof.kernels import plan_kernels
from ssmprof.profiler.harness import run_training
from ssmprof.profiler.host_sampler import HostSampler
from ssmprof.workloads.registry import get_workload

FORKS = """\
import os
import torch
import ssmprof

model = torch.nn.Linear(4, 4)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for i in range(40):
    with ssmprof.step(model=model, optimizer=optimizer):
        model(torch.ones(2, 4)).sum().backward()
        optimizer.step()
        child = os.fork()
        if child == 0:
            import gc
            gc.collect()  # the sampler's collection callback, inherited: must not wait on its lock
            os._exit(0)
        os.waitpid(child, 0)
"""


def test_a_failing_sampler_leaves_the_run_and_says_why(monkeypatch):
    def broken(self, frames):
        raise RuntimeError("no frames today")

    monkeypatch.setattr(HostSampler, "_doing", broken)
    workload = get_workload("mamba2-lm")
    cfg = workload.config("tiny", {})
    plan = plan_kernels(workload.kernel_ops(cfg), "cpu", False, cfg.dtype)
    result = run_training(workload, "tiny", cfg, plan, steps=3, warmup=0, sample_host=True)
    assert result.host_time == {"missing": "the host sampler stopped: RuntimeError: no frames today"}
    assert len(result.step_times_ms) == 3 and result.final_loss == result.final_loss


def test_a_run_whose_sampler_failed_says_so_in_its_host_finding(tmp_path):
    summary = ssmprof.load(schema_run(tmp_path)).summary
    assert summary.host_time is None
    host = summary.findings.set_index("kind").loc["host", "finding"]
    assert host.endswith("The host's time is not attributed: the host sampler stopped: RuntimeError: boom.")


def schema_run(tmp_path):
    """A bundled run rewritten as if its sampler had failed."""
    from ssmprof import bundled

    source = bundled.runs(next(iter(bundled.GPUS)))[0]
    run = schema.read_run(source)
    harness = run.info.harness.model_copy(update={"host_time": schema.HostTime(missing="the host sampler stopped: "
                                                                                        "RuntimeError: boom")})
    info = run.info.model_copy(update={"harness": harness})
    return schema.write_run(tmp_path / "run", info, run.kernels)


def test_a_script_that_forks_profiles_with_its_host_sampled(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(FORKS)
    out = tmp_path / "runs"
    done = subprocess.run([sys.executable, "-m", "ssmprof.cli", "profile", "--script", str(script), "--device", "cpu",
                           "--out", str(out), "--name", "forks"], capture_output=True, text=True, cwd=tmp_path,
                          check=False, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr[-2000:]
    host_time = schema.read_run(out / "forks").info.harness.host_time
    assert host_time.missing is None and len(host_time.sampled_steps_ms) == 10 and host_time.readings > 0
