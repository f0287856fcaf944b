"""Regression-gate outputs: a markdown summary (CI step summaries) and JUnit XML (CI test panels)."""

from __future__ import annotations

from xml.etree import ElementTree as ET

import pandas as pd


def _label(row) -> str:
    grid, block = f"{row.grid_x}x{row.grid_y}x{row.grid_z}", f"{row.block_x}x{row.block_y}x{row.block_z}"
    return f"{row.kernel_name} [{row.phase}, grid {grid}, block {block}]"


def gate_markdown(table: pd.DataFrame) -> str:
    regressed = table[table["regressed"]]
    lines = [f"## ssmprof regress: {'FAIL' if len(regressed) else 'PASS'}", "",
             f"{len(regressed)} regressions in {len(table)} kernel metrics checked; "
             f"{int(table['missing'].sum())} baseline kernel metrics absent from this run.", ""]
    if len(regressed):
        lines += ["| kernel | metric | baseline median | now | worse by | allowed |", "|---|---|---|---|---|---|"]
        lines += [f"| {_label(r)} | {r.metric} | {r.median:.4g} | {r.current:.4g} | {r.worse_by:.4g} | "
                  f"{r.allowed:.4g} |" for r in regressed.itertuples()]
    return "\n".join(lines) + "\n"


def gate_junit(table: pd.DataFrame) -> str:
    checked = table[~table["missing"]]
    suite = ET.Element("testsuite", name="ssmprof.regress", tests=str(len(checked)),
                       failures=str(int(checked["regressed"].sum())))
    for row in checked.itertuples():
        case = ET.SubElement(suite, "testcase", classname=_label(row), name=row.metric)
        if row.regressed:
            failure = ET.SubElement(case, "failure", message=f"{row.metric} worse by {row.worse_by:.4g} "
                                                             f"(allowed {row.allowed:.4g})")
            failure.text = f"baseline median {row.median:.6g}, now {row.current:.6g}"
    return ET.tostring(suite, encoding="unicode")
