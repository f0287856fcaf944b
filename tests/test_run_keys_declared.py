"""Every key a run.json holds is declared in `schema.RunInfo`: the bundled runs and the fixtures validate with
unknown keys refused, and a key that is not declared is one clear error, on writing as on reading."""

import json
from pathlib import Path

import pytest

from ssmprof import bundled, schema

DATA = Path(__file__).parent / "data"
# run.json files of run directories (`schema_version`); tests/data/mamba3-mimo-small-h200/run.json is a harness
# result (`ssmprof run --json`), another format under the same name
RUN_JSONS = sorted(path for root in (bundled.REFERENCE, DATA) for path in root.rglob("run.json")
                   if "schema_version" in json.loads(path.read_text()))


def test_the_bundled_runs_and_fixtures_are_found():
    assert len(RUN_JSONS) >= 100
    assert bundled.REFERENCE / "h100-sxm" / "mamba2-lm" / "run.json" in RUN_JSONS


@pytest.mark.parametrize("path", RUN_JSONS, ids=lambda path: str(path.parent.relative_to(path.parents[2])))
def test_every_key_of_a_run_json_is_declared(path):
    schema.check_info(json.loads(path.read_text()))


@pytest.mark.parametrize("where", [(), ("gpu",), ("harness",), ("collectors", "counters"), ("gpu", "clocks")])
def test_an_undeclared_key_is_refused_in_one_line(where):
    info = json.loads((bundled.REFERENCE / "h100-sxm" / "mamba2-lm" / "run.json").read_text())
    section = info
    for key in where:
        section = section[key]
    section["typo_key"] = 1
    with pytest.raises(schema.SchemaError, match=r"^run\.json .*" + ".".join((*where, "typo_key")).replace(".", r"\.")):
        schema.check_info(info)
