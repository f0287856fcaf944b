"""Sharded sweeps: `--shard I/N` points run by separate processes into one folder, each point in its own file,
the manifest updated in turn, the regime map drawn once no point is pending; on the CPU, each point's run the
bundled H100 run of its workload (deterministic: two sweeps of one grid give one map)."""

import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from ssmprof import bundled, schema
from ssmprof.errors import InvalidConfig
from ssmprof.pipeline import measure
from ssmprof.pipeline import sweep as sweeping
from ssmprof.pipeline.sweep import Shard

TESTS = Path(__file__).parent
ROOT = TESTS.parent
SPEC = sweeping.SweepSpec(["mamba2-lm", "transformer"], "tiny", ["seq_len=32,64"], [], "none", 1, 0)


def reference_profile(request, progress=None):
    """`measure.profile` without a GPU, deterministic: the bundled H100 run of the point's workload, its config
    carrying the point's settings."""
    options = request.workload
    ready = measure.prepare(options, "cpu")
    reference = schema.read_run(bundled.REFERENCE / "h100-sxm" / options.workload)
    settings = {key: getattr(ready.cfg, key) for key, _, _ in (s.partition("=") for s in options.sets)}
    info = reference.info.model_dump()
    info["workload"]["config"].update(settings)
    return schema.write_run(request.settings.out / request.settings.name, schema.new_run_info(info), reference.kernels)


def install(patch=None) -> None:
    """The sweep pipeline as on a GPU host, each point profiled by `reference_profile` (in this process, or
    through `patch`, a MonkeyPatch)."""
    setattr_ = patch.setattr if patch is not None else setattr
    setattr_(sweeping, "resolve_device", lambda device: "cuda")
    setattr_(measure, "resolve_device", lambda device: "cpu")
    setattr_(measure, "profile", reference_profile)


def in_process(code: str) -> subprocess.Popen:
    """A separate Python process running `code` with `reference_profile` installed."""
    script = f"import sys; sys.path.insert(0, {str(TESTS)!r}); import test_sweep_shards as t; t.install()\n{code}"
    return subprocess.Popen([sys.executable, "-c", script], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


@pytest.mark.parametrize(("text", "shard"), [("1/1", Shard(1, 1)), ("2/4", Shard(2, 4))])
def test_a_shard_holds_every_nth_point(text, shard):
    assert Shard.parse(text) == shard and str(shard) == text
    assert [position for position in range(9) if shard.holds(position)] == list(range(shard.index - 1, 9,
                                                                                       shard.count))


@pytest.mark.parametrize("text", ["0/2", "3/2", "1", "a/b", "1/0"])
def test_a_bad_shard_is_one_line(text):
    with pytest.raises(InvalidConfig, match="--shard expects I/N"):
        Shard.parse(text)


def test_concurrent_writers_never_corrupt_the_manifest(tmp_path):
    """Four processes record five points each, at once: every point and every point's wall time is in the
    manifest (a read-change-write without the lock loses the others' changes), and it is whole."""
    points = [schema.SweepPoint(workload="mamba2-lm", settings={"seq_len": n}) for n in range(20)]
    manifest = schema.make_document(schema.SweepManifest, workloads=["mamba2-lm"], preset="tiny",
                                    axes={"seq_len": list(range(20))}, fixed={}, counters="none", steps=1,
                                    points=points, wall_s=0.0)
    schema.write_document(manifest, tmp_path / schema.SWEEP_MANIFEST)
    code = ("from pathlib import Path\nfrom ssmprof import schema\nfrom ssmprof.pipeline import sweep as s\n"
            "shard = s.Shard({index}, 4)\nout = Path({out!r})\n"
            "for n in range(20):\n"
            "    if shard.holds(n):\n"
            "        point = schema.SweepPoint(workload='mamba2-lm', settings={{'seq_len': n}}, status='complete',"
            " run=f'r{{n}}', wall_s=0.25)\n"
            "        s._record(out, point, 0.25, shard)\n")
    writers = [in_process(code.format(index=index, out=str(tmp_path))) for index in range(1, 5)]
    outputs = [writer.communicate(timeout=300)[0] for writer in writers]
    assert [writer.returncode for writer in writers] == [0] * 4, outputs
    written = schema.read_document(schema.SweepManifest, tmp_path / schema.SWEEP_MANIFEST)
    assert [p.run for p in written.points] == [f"r{n}" for n in range(20)]
    assert written.wall_s == pytest.approx(20 * 0.25)
    assert not list(tmp_path.glob(".*partial*"))


def test_sweep_shards_from_two_processes_merge_into_the_unsharded_map(tmp_path, monkeypatch):
    install(monkeypatch)
    whole = sweeping.sweep(sweeping.SweepRequest(SPEC, tmp_path / "whole"))
    began = time.perf_counter()
    shards = [in_process(f"from pathlib import Path\nfrom ssmprof.pipeline import sweep as s\n"
                         f"s.sweep(s.SweepRequest(t.SPEC, Path({str(tmp_path / 'sharded')!r}), "
                         f"shard=s.Shard({index}, 2)))")
              for index in (1, 2)]
    outputs = [shard.communicate(timeout=600)[0] for shard in shards]
    took = time.perf_counter() - began
    assert [shard.returncode for shard in shards] == [0, 0], outputs
    merged = schema.read_sweep(tmp_path / "sharded")
    keep = ("workload", "settings", "status", "run")
    assert [p.model_dump(include=set(keep)) for p in merged.points] == \
        [p.model_dump(include=set(keep)) for p in whole.manifest.points]
    shards_of = {schema.read_document(schema.SweepPointFile, path).point.run: schema.read_document(
        schema.SweepPointFile, path).shard for path in (tmp_path / "sharded" / schema.SWEEP_POINTS).glob("*.json")}
    assert set(shards_of.values()) == {"1/2", "2/2"}  # both processes ran points
    assert (tmp_path / "sharded" / "sweep-report.html").is_file()  # drawn by the shard that ended last
    csvs = sorted(path.name for path in (tmp_path / "whole" / "sweep-csv").glob("*.csv"))
    assert csvs == sorted(path.name for path in (tmp_path / "sharded" / "sweep-csv").glob("*.csv")) and csvs
    for name in csvs:
        one, other = (pd.read_csv(tmp_path / folder / "sweep-csv" / name) for folder in ("whole", "sharded"))
        timing = [column for column in one.columns if column == "wall_s" or column == "sweep"]
        pd.testing.assert_frame_equal(one.drop(columns=timing), other.drop(columns=timing), obj=name)
    print(f"two sweep shards: {took:.1f} s")


def test_a_shard_command_is_the_sweep_of_that_shard_without_its_map(tmp_path):
    spec = sweeping.SweepSpec(["mamba2-lm"], "small", ["seq_len=1024,2048", "d_state=64,128"], ["batch_size=2"],
                              "focus", 3, 1)
    command = sweeping.shard_command(sweeping.SweepRequest(spec, tmp_path, resume=True, shard=Shard(2, 4)))
    assert command[1:] == ["-m", "ssmprof.cli", "sweep", "mamba2-lm", "--preset", "small", "--counters", "focus",
                           "--steps", "3", "--out", str(tmp_path), "--shard", "2/4", "--no-report", "--resume",
                           "--vary", "seq_len=1024,2048", "--vary", "d_state=64,128", "--set", "batch_size=2",
                           "--warmup", "1"]


def test_suite_profiles_run_one_per_gpu_at_once(tmp_path, monkeypatch):
    """`suite --gpus 2`: three workloads' profiles, at most two at once, each child on a GPU that is free."""
    running, seen = set(), []

    class Profile:  # a child that ends at its second poll
        def __init__(self, command, env):
            self.device, self.polls = env["CUDA_VISIBLE_DEVICES"], 0
            assert self.device not in running
            running.add(self.device)
            seen.append((command[4], self.device, command[command.index("--name") + 1]))
            self.returncode = None

        def poll(self):
            self.polls += 1
            if self.polls == 2:
                running.discard(self.device)
                self.returncode = 0
            return self.returncode

    monkeypatch.setattr(measure.subprocess, "Popen", Profile)
    monkeypatch.setattr(measure.time, "sleep", lambda s: None)
    paths = measure.profiles_on_gpus(["mamba2-lm", "hybrid", "transformer"], "paper", tmp_path, "sampled", 5,
                                     ["4", "5"])
    assert [(workload, device) for workload, device, _ in seen] == [("mamba2-lm", "4"), ("hybrid", "5"),
                                                                    ("transformer", "4")]
    assert paths == [tmp_path / name for _, _, name in seen] and seen[0][2].startswith("mamba2-lm-paper-")
