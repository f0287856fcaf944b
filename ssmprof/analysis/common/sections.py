"""The typed frames analyses hand to reports: `Sections`, one field a section with `frames()` for the CSV files
and titled tables, and a run's `Summary` (`summaries.run.analyze` builds it). They sit below the analyses that fill and
word them (`summaries`, `findings`), so that each imports the type without importing the others."""

from __future__ import annotations

from dataclasses import dataclass, field, fields

import pandas as pd

CHART_ONLY = {"chart_only": True}  # field metadata of a section a chart draws that is no table and no CSV file


@dataclass(frozen=True, kw_only=True)
class Sections:
    """Frames an analysis hands to reports, one field a section (a run's `Summary`, a suite's
    `suite.SuiteOverview`, a sweep's `sweep.RegimeTables`); None where the data cannot have the section."""

    def frames(self) -> dict[str, pd.DataFrame]:
        """The sections present, by name, in field order: one CSV file each, and the titled tables of the page
        (not those marked CHART_ONLY)."""
        return {section.name: frame for section in fields(self)
                if not section.metadata.get("chart_only") and (frame := getattr(self, section.name)) is not None}

    def __repr__(self) -> str:
        """One line a section present, `name: rows x columns`, where the dataclass's own would print every frame."""
        present = [(section.name, frame) for section in fields(self)
                   if (frame := getattr(self, section.name)) is not None]
        lines = [f"  {name}: {len(frame)} rows x {len(frame.columns)} columns" for name, frame in present]
        return f"{type(self).__name__} of {len(present)} sections\n" + "\n".join(lines)


@dataclass(frozen=True, kw_only=True, repr=False)
class Summary(Sections):
    """The summary frames of one run (`summaries.run.analyze`), one field a section: what reports draw and `--csv`
    writes, under the field's name. A section is None where the run cannot have it (no counters, no ceilings, one
    rank, no SSM kernels, ...). Fields are in the order of the run's CSV files."""

    breakdown: pd.DataFrame
    by_category: pd.DataFrame
    top_kernels: pd.DataFrame
    caches: pd.DataFrame
    counter_checks: pd.DataFrame
    profiled_iteration: pd.DataFrame
    host: pd.DataFrame
    host_time: pd.DataFrame | None = None
    host_categories: pd.DataFrame | None = None
    host_sites: pd.DataFrame | None = None
    rank_busy: pd.DataFrame | None = None
    late_rank: pd.DataFrame | None = None
    rank_hosts: pd.DataFrame | None = None
    late_rank_sites: pd.DataFrame | None = None
    cuda_graphs: pd.DataFrame | None = None
    gemm_work: pd.DataFrame | None = None
    lent_by_grid: pd.DataFrame | None = None
    counter_pass_costs: pd.DataFrame | None = None
    limiters: pd.DataFrame | None = None
    limiters_ssm: pd.DataFrame | None = None
    instruction_bounds: pd.DataFrame | None = None
    stalls: pd.DataFrame | None = None
    roofline: pd.DataFrame | None = None
    roofline_summary: pd.DataFrame | None = None
    roofline_points: pd.DataFrame | None = None
    headroom: pd.DataFrame | None = None
    headroom_by_category: pd.DataFrame | None = None
    calibration_defects: pd.DataFrame | None = None
    ssd_dataflow: pd.DataFrame | None = None
    ssd_fusion: pd.DataFrame | None = None
    tensor_vector: pd.DataFrame | None = None
    tensor_vector_ssm: pd.DataFrame | None = None
    table_ii: pd.DataFrame | None = None
    tensor_vector_thresholds: pd.DataFrame | None = None
    table_ii_causes: pd.DataFrame | None = None
    dram_beside_study: pd.DataFrame | None = None
    tensor_instructions: pd.DataFrame | None = None
    ssd_analytic_vs_measured: pd.DataFrame | None = None
    per_rank: pd.DataFrame | None = None
    collective_counts: pd.DataFrame | None = None
    bus_bandwidth: pd.DataFrame | None = None
    exposed_communication: pd.DataFrame | None = None
    rank_imbalance: pd.DataFrame | None = None
    communication_projection: pd.DataFrame | None = None
    scaling_efficiency: pd.DataFrame | None = None
    # the run in words and what it is: `analyze` adds them last, from the sections above and run.json
    findings: pd.DataFrame = field(default_factory=pd.DataFrame)
    provenance: pd.DataFrame = field(default_factory=pd.DataFrame)
