"""A kernel branch under test: where mamba-ssm came from (a git URL, a checkout, a wheel) is recorded beside its
version (`kernels.package_source`), shown by `doctor`, and named by `compare` and the gate when two runs differ
in it. The installs are fake dist-info folders put first on sys.path, each with the direct_url.json pip writes."""

import json
import subprocess

import pytest
from known_work import typed_run_info
from typer.testing import CliRunner

from ssmprof import kernels
from ssmprof.analysis.change.compare import check_comparable
from ssmprof.cli import app
from ssmprof.profiler import environment


def _install(tmp_path, monkeypatch, direct_url: dict | None) -> None:
    """A mamba-ssm dist-info (with `direct_url` as its direct_url.json, none where None) ahead of the real one."""
    site = tmp_path / "site"
    info = site / "mamba_ssm-2.3.2.post1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: mamba-ssm\nVersion: 2.3.2.post1\n")
    if direct_url is not None:
        (info / "direct_url.json").write_text(json.dumps(direct_url))
    monkeypatch.syspath_prepend(str(site))


def _checkout(folder) -> str:
    """A git checkout with one commit tagged v2.3.2-mine; its commit."""
    folder.mkdir()
    git = ["git", "-C", str(folder), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    (folder / "setup.py").write_text("")
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "kernel change"], check=True)
    subprocess.run([*git, "tag", "v2.3.2-mine"], check=True)
    return subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()


def test_a_git_url_install_records_its_commit(tmp_path, monkeypatch):
    _install(tmp_path, monkeypatch, {"url": "https://github.com/me/mamba.git",
                                     "vcs_info": {"vcs": "git", "commit_id": "0123abcd", "requested_revision": "br"}})
    versions = environment.software_versions()
    assert versions["mamba_ssm"] == "2.3.2.post1"
    assert versions["mamba_ssm_source"] == "git 0123abcd https://github.com/me/mamba.git"


def test_an_editable_checkout_records_its_describe_and_commit(tmp_path, monkeypatch):
    commit = _checkout(tmp_path / "mamba")
    _install(tmp_path, monkeypatch, {"url": f"file://{tmp_path}/mamba", "dir_info": {"editable": True}})
    assert kernels.package_source("mamba-ssm") == f"editable {tmp_path}/mamba (git v2.3.2-mine {commit})"
    (tmp_path / "mamba" / "setup.py").write_text("# changed")
    assert f"(git v2.3.2-mine+changes {commit})" in kernels.package_source("mamba-ssm")


@pytest.mark.parametrize(
    ("direct_url", "source"),
    [
        ({"url": "file:///wheels/mamba_ssm-2.3.2-cp312-linux_x86_64.whl",
          "archive_info": {"hashes": {"sha256": "feed"}}},
         "file:///wheels/mamba_ssm-2.3.2-cp312-linux_x86_64.whl (sha256 feed)"),
        ({"url": "file:///gone", "dir_info": {}}, "built from /gone (not a git checkout)"),
        (None, None),  # from an index: the version says it all
    ],
)
def test_other_installs(tmp_path, monkeypatch, direct_url, source):
    _install(tmp_path, monkeypatch, direct_url)
    assert kernels.package_source("mamba-ssm") == source
    assert environment.software_versions().get("mamba_ssm_source") == source


def test_doctor_shows_it(tmp_path, monkeypatch):
    _install(tmp_path, monkeypatch, {"url": "https://github.com/me/mamba.git",
                                     "vcs_info": {"vcs": "git", "commit_id": "0123abcd"}})
    result = CliRunner().invoke(app, ["doctor"])
    assert result.exit_code == 0, result.output
    assert "mamba_ssm_source" in result.output and "0123abcd" in result.output


def test_compare_names_a_kernel_branch_change():
    a, b = (typed_run_info(versions={"mamba_ssm": "2.3.2.post1", "mamba_ssm_source": f"git {commit} url"})
            for commit in ("0123abcd", "4567ef01"))
    assert "library versions differ: mamba_ssm_source git 0123abcd url -> git 4567ef01 url" in check_comparable(a, b)
    assert not [note for note in check_comparable(a, a) if "library versions" in note]


def test_the_gate_names_a_kernel_branch_change(tmp_path):
    from ssmprof.pipeline import gate
    from ssmprof.schema import Baseline, make_document

    base, now = (typed_run_info(versions={"mamba_ssm": "2.3.2.post1", "mamba_ssm_source": f"git {commit} url"})
                 for commit in ("0123abcd", "4567ef01"))
    document = make_document(Baseline, workload=base.workload, source=gate.source_of(base, ["base"]), rows=[])
    notes = gate.provenance_notes(document, now, tmp_path / "run")
    assert "library versions differ: mamba_ssm_source git 0123abcd url -> git 4567ef01 url" in notes
