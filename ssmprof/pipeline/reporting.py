"""report, reference, results, compare and project: from run directories to text (HTML or markdown), on any
machine. Each returns what it rendered and writes it where an output path is given."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import NamedTuple

import pandas as pd

from ssmprof import bundled
from ssmprof.analysis.change.compare import (
    check_comparable,
    compare_categories_launches,
    compare_launches,
    counter_notes,
    iteration_notes,
    step_speedup,
    step_split_table,
    systematic_shifts,
)
from ssmprof.analysis.change.projection import (
    left_out,
    project_categories,
    project_kernels,
    project_step,
    projection_error,
)
from ssmprof.analysis.common.sections import Summary
from ssmprof.analysis.findings.compare import compare_findings
from ssmprof.analysis.findings.run import provenance
from ssmprof.analysis.launches.frame import has_counters
from ssmprof.analysis.limits.roofline import (
    calibration_defects,
    defects_by_kernel,
    defects_note,
    roofline,
    roofline_points,
)
from ssmprof.analysis.limits.tensor_vector import STUDY_WORKLOAD
from ssmprof.analysis.step.communication import one_rank, parallel_overview, single_gpu_twin
from ssmprof.analysis.summaries import suite
from ssmprof.analysis.summaries.run import analyze, warnings_for
from ssmprof.analysis.trust.noise import kept_steps, step_interval
from ssmprof.errors import InvalidConfig
from ssmprof.hardware import SPECS, Ceilings, links_frame, model_ceilings, read_device_profile, run_ceilings, spec_for
from ssmprof.pipeline import regimes
from ssmprof.pipeline.history import refuse_repeated
from ssmprof.pipeline.loading import load_run, origin
from ssmprof.pipeline.outputs import check_file, check_folder, write_text
from ssmprof.reports.render import (
    RESULTS_END,
    RESULTS_START,
    render_compare,
    render_html,
    render_markdown,
    render_parallel_results,
    render_projection,
    render_results,
    write_csv,
)
from ssmprof.reports.trace import trace_json
from ssmprof.schema import DeviceProfile, Run, RunInfo

FORMATS = ("html", "md")


class AnalyzedRun(NamedTuple):
    """One run as the renderers take it: its run.json, its summary frames, and the warnings to show."""

    info: RunInfo
    summary: Summary
    warnings: list[str]


def analyze_runs(paths: list[Path], profile: DeviceProfile | None = None,
                 csv: Path | None = None) -> tuple[list[AnalyzedRun], suite.SuiteOverview | None]:
    """Every run analyzed on its own GPU's ceilings (`hardware.run_ceilings`), and the suite overview where there
    are several runs; with `csv`, every frame is also written there as CSV."""
    return _analyze(paths, _load(paths, profile), csv)


def _load(paths: list[Path], profile: DeviceProfile | None) -> dict[int, tuple[Run, Ceilings | None, list[str]]]:
    """Each run loaded once, with its own GPU's ceilings (whatever runs are beside it) and their notes."""
    loaded = {index: load_run(path) for index, path in enumerate(paths)}
    return {index: (run, *ceilings_of(run, profile)) for index, run in loaded.items()}


def ceilings_of(run: Run, profile: DeviceProfile | None = None) -> tuple[Ceilings | None, list[str]]:
    """`hardware.run_ceilings` of a loaded run (`profile`: the one given with --device-profile, if any)."""
    return run_ceilings(run.info.gpu.name, run.path, profile)


def _analyze(paths: list[Path], loaded: dict[int, tuple[Run, Ceilings | None, list[str]]],
             csv: Path | None) -> tuple[list[AnalyzedRun], suite.SuiteOverview | None]:
    analyzed = []
    for index, path in enumerate(paths):
        run, limits, notes = loaded[index]
        twin = single_gpu_twin(run.info, [other.info for other, _, _ in loaded.values()])
        summary = analyze(run, limits, origin(path), links_frame(), twin)
        if csv is not None:
            write_csv(summary.frames(), csv, f"{index}-" if len(paths) > 1 else "")
        analyzed.append(AnalyzedRun(run.info, summary, warnings_for(run, summary, notes)))
    if len(paths) < 2:
        return analyzed, None
    labels = run_labels(loaded)
    overview = suite.overview(dict(zip(labels, (run for run, _, _ in loaded.values()), strict=True)),
                              dict(zip(labels, (limits for _, limits, _ in loaded.values()), strict=True)),
                              dict(zip(labels, (run.summary for run in analyzed), strict=True)))
    if csv is not None:
        write_csv(overview.frames(), csv, "suite-")
    return analyzed, overview


def run_labels(loaded: dict[int, tuple[Run, Ceilings | None, list[str]]]) -> list[str]:
    """A name per run that tells it apart from the others of the set: the workload, its parallel layout where it
    has one (`tp2x dp1`, `no-SP`), `cuda-graphs` where it timed the step as one, and the GPU and position only where
    two would still read alike."""
    labels = []
    for index, (run, _, _) in loaded.items():
        parallel = run.info.parallel
        label = run.info.workload.name + (f" tp{parallel.tp}x dp{parallel.dp}" if parallel else "")
        label += " no-SP" if parallel and not parallel.sequence_parallel else ""
        label += " cuda-graphs" if run.info.harness.cuda_graphs else ""
        labels.append(label if label not in labels else f"{label} ({run.info.gpu.name}, #{index})")
    return labels


def report(runs: list[Path], fmt: str = "html", output: Path | None = None, csv: Path | None = None,
           device_profile: Path | None = None, trace: Path | None = None) -> str:
    """`ssmprof report`: the runs' report (a suite overview first where there are several); with `trace`, also
    the profiled iterations as a Perfetto / Chrome trace (`reports.trace`). Sweep folders (`ssmprof sweep`)
    get their regime map instead (`pipeline.regimes`)."""
    if runs and all(regimes.is_sweep(path) for path in runs):
        if trace is not None:
            raise InvalidConfig("--trace takes run directories, not sweeps (give a sweep point's run directory)")
        return regimes.report(runs, fmt, output, csv, device_profile)
    return report_runs(runs, fmt, output, csv, device_profile, trace)


def report_runs(runs: list[Path], fmt: str = "html", output: Path | None = None, csv: Path | None = None,
                device_profile: Path | None = None, trace: Path | None = None) -> str:
    """`report` of run directories (what `profile` and `suite` write, never a sweep): the report and, with
    `trace`, the Perfetto trace."""
    _check_format(fmt)
    check_file(output, "--output")
    check_file(trace, "--trace")
    check_folder(csv, "--csv")
    loaded = _load(runs, read_device_profile(device_profile))
    analyzed, overview = _analyze(runs, loaded, csv)
    text = render_html(analyzed, overview, run_labels(loaded)) if fmt == "html" else render_markdown(analyzed, overview)
    if trace is not None:
        write_output(trace_json([traced(run, limits) for run, limits, _ in loaded.values()]), trace)
    return write_output(text, output)


def traced(run: Run, limits: Ceilings | None) -> tuple[RunInfo, pd.DataFrame]:
    """A run's (run.json, per-launch frame) for the trace: the analysis frame with each launch's roofline
    verdict and % of roof where it has counters, on the ceilings its report used."""
    kernels = run.kernels
    if limits is not None and has_counters(kernels):
        kernels = roofline(kernels, limits)
    return run.info, kernels


def reference(out: Path) -> list[Path]:
    """`ssmprof reference`: a suite report per GPU of the bundled runs, one of its bundled multi-GPU runs with the
    single-GPU runs of their host, one of the shipped models it ran (`hf:` workloads), an H100-vs-H200 comparison
    per workload measured on both, the regime map of each bundled sweep, and a Perfetto trace per GPU (every
    workload's profiled iteration), written into `out`; returns the files written (reports first, traces last)."""
    check_folder(out, "--out")
    written, traces = [], []
    infos = {}  # per GPU, each workload's run.json: which pairs compare one configuration
    for gpu in bundled.GPUS:
        loaded = _load(bundled.runs(gpu), None)
        infos[gpu] = {run.info.workload.name: run.info for run, _, _ in loaded.values()}
        analyzed, overview = _analyze(bundled.runs(gpu), loaded, None)
        written.append(out / f"suite-{gpu}.html")
        write_output(render_html(analyzed, overview, run_labels(loaded)), written[-1])
        traces.append(out / f"trace-{gpu}.json")
        write_output(trace_json([traced(run, limits) for run, limits, _ in loaded.values()]), traces[-1])
    for gpu in bundled.GPUS:
        paths = bundled.parallel_runs(gpu)
        if paths:  # their own page: their speedups are over the single-GPU runs of their host, not the suite's
            written.append(out / f"parallel-{gpu}.html")
            loaded = _load(paths, None)
            write_output(render_html(*_analyze(paths, loaded, None), run_labels(loaded),
                                     [another_host_note(loaded, gpu)]), written[-1])
    for gpu in bundled.GPUS:
        paths = bundled.shipped_models(gpu)
        if paths:  # their own page: other models and presets than the suite's, on their own hosts' profiles
            written.append(out / f"models-{gpu}.html")
            loaded = _load(paths, None)
            write_output(render_html(*_analyze(paths, loaded, None), run_labels(loaded)), written[-1])
    first, second = bundled.GPUS
    on_second = {path.name: path for path in bundled.runs(second)}
    both = suite.same_config(infos[first], infos[second])
    for path_a in bundled.runs(first):
        if path_a.name not in both:
            continue
        path_b = on_second[path_a.name]
        target = out / f"compare-{path_a.name}-{first}-vs-{second}.html"
        compare(path_a, path_b, "html", target)
        written.append(target)
    for gpu in bundled.GPUS:
        for folder in bundled.sweeps(gpu):
            written.append(out / f"sweep-{gpu}-{folder.name}.html")
            regimes.report(folder, "html", written[-1])
    return written + traces


def another_host_note(loaded: dict[int, tuple[Run, Ceilings | None, list[str]]], gpu: str) -> str:
    """Why the single-GPU step times of a parallel page differ from the suite page's: a multi-GPU host measured them
    (the speedups are over these), with the step times of one workload on both pages. Whether it was the very host
    of the multi-GPU runs a run.json cannot say (hosts lent by a scheduler share one name), so the note does not."""
    suite_steps = {path.name: load_run(path).info for path in bundled.runs(gpu)}
    for run, _, _ in loaded.values():
        name, here = run.info.workload.name, run.info
        if here.parallel is None and name in suite_steps:
            there = suite_steps[name]
            return (f"The single-GPU runs here were measured on a multi-GPU host "
                    f"({here.host.cpu_count} CPU cores, {(here.created or '')[:10]}), not the suite page's "
                    f"(suite-{gpu}.html, {there.host.cpu_count} CPU cores, {(there.created or '')[:10]}): their step "
                    f"times differ (e.g. {name} {here.harness.step_ms:.2f} ms here, "
                    f"{there.harness.step_ms:.2f} ms there). Each speedup on this page is over these single-GPU "
                    "runs.")
    return "The single-GPU runs here were measured on a multi-GPU host: the speedups are over them."


def results(readme: Path | None = None) -> str:
    """`ssmprof results`: the README's Results section from the bundled runs; with `readme`, also spliced into
    that file in place of its current section. The file is read before any run is loaded: a missing one or one
    without the section's markers is one line, and nothing is written."""
    current = _results_target(readme)
    first, second = bundled.GPUS
    loaded = {gpu: {path.name: load_run(path) for path in bundled.runs(gpu)} for gpu in bundled.GPUS}
    kernels = {gpu: {w: run.kernels for w, run in loaded[gpu].items()} for gpu in loaded}
    infos = {gpu: {w: run.info for w, run in loaded[gpu].items()} for gpu in loaded}
    measured = {w: limits for w, run in loaded[first].items() if (limits := ceilings_of(run)[0]) is not None}
    both = suite.same_config(infos[first], infos[second])
    paired = {gpu: {w: kernels[gpu][w] for w in both} for gpu in bundled.GPUS}
    # the projection sets each GPU model's ceilings against the other's, as `ssmprof project` does
    ceilings = {gpu: model_ceilings(gpu) for gpu in bundled.GPUS}
    steps = pd.concat([suite.step_times(infos[gpu]).assign(gpu=bundled.GPUS[gpu]) for gpu in bundled.GPUS],
                      ignore_index=True)
    text = render_results(
        (bundled.GPUS[first], bundled.GPUS[second]), steps, suite.profiling_cost(steps, bundled.paper_suite()),
        suite.category_shares(kernels[first]),
        suite.ssm_kernels(kernels[first], measured),
        suite.gpu_pair(paired[first], paired[second], infos[first], infos[second]),
        suite.projection_errors(paired[first], paired[second], ceilings[first], ceilings[second]),
        suite.beside_study(loaded[first][STUDY_WORKLOAD].kernels, loaded[first][STUDY_WORKLOAD].info,
                           measured[STUDY_WORKLOAD]),
        study_memory(first))
    extra = sweep_headlines() + parallel_results()
    if extra:
        text = text.replace(RESULTS_END, extra + RESULTS_END)
    if readme is not None:
        write_text(readme, splice_results(current, text, readme))
    return text


def study_memory(gpu: str) -> tuple[pd.DataFrame, pd.DataFrame] | None:
    """The SSM kernels' memory use under the study's definitions measured on `gpu` (`bundled.study_memory`): the
    table by definition and the longest kernels (`suite.ssm_memory_table`, `ssm_memory_longest`); None where not
    measured there."""
    path = bundled.study_memory(gpu)
    if path is None:
        return None
    measured = pd.read_csv(path)
    return suite.ssm_memory_table(measured), suite.ssm_memory_longest(measured)


def _results_target(readme: Path | None) -> str:
    """The text of the file `--readme` names ("" without one), checked to hold the Results markers."""
    if readme is None:
        return ""
    check_file(readme, "--readme")
    try:
        current = readme.read_text()
    except OSError as exc:
        raise InvalidConfig(f"--readme {readme}: {exc.strerror or exc}; it names a file with the Results section "
                            "to replace") from None
    except UnicodeDecodeError:  # a binary file (a parquet, an image) named by mistake
        raise InvalidConfig(f"--readme {readme} is not a text file; it names a file with the Results section to "
                            "replace") from None
    splice_results(current, "", readme)
    return current


def sweep_headlines() -> str:
    """The regime maps' findings of the bundled sweeps, per GPU, as markdown ("" while none is bundled)."""
    lines = []
    for gpu, label in bundled.GPUS.items():
        for folder in bundled.sweeps(gpu):
            analysis = regimes.analyze([folder])
            manifest = analysis.manifests[0]
            lines += ["", f"**Sweep on the {label}**: {', '.join(manifest.workloads)} --preset {manifest.preset} over "
                      f"{' x '.join(f'{k} {min(v)}..{max(v)}' for k, v in manifest.axes.items())} "
                      f"(`ssmprof report ssmprof/reference/{gpu}/{bundled.SWEEPS}/{folder.name}`).", ""]
            lines += [f"- {r.finding}" for r in analysis.tables.findings.itertuples()]
    return "\n".join(lines) + "\n" if lines else ""


def parallel_results() -> str:
    """The bundled multi-GPU runs' table per GPU (`communication.parallel_overview`), as markdown ("" while none is
    bundled)."""
    text = ""
    for gpu, label in bundled.GPUS.items():
        runs = {path.name: load_run(path) for path in bundled.parallel_runs(gpu)}
        if runs:
            table = parallel_overview(runs)
            parallel = next(run.info.parallel for run in runs.values() if run.info.parallel is not None)
            folder = f"ssmprof/reference/{gpu}/{bundled.PARALLEL}"
            text += render_parallel_results(label, folder, parallel, table)
    return text


def splice_results(current: str, section: str, where: Path) -> str:
    """`current` (a README) with its RESULTS_START ... RESULTS_END section replaced by `section`."""
    if RESULTS_START not in current or RESULTS_END not in current:
        raise InvalidConfig(f"{where} has no {RESULTS_START} ... {RESULTS_END} section to replace")
    head, rest = current.split(RESULTS_START, 1)
    return head + section + rest.split(RESULTS_END, 1)[1].lstrip("\n")


def compare(run_a: Path, run_b: Path, fmt: str = "md", output: Path | None = None) -> str:
    """`ssmprof compare`: two runs of one workload, by category and by kernel (matched by launch config)."""
    _check_format(fmt)
    check_file(output, "--output")
    refuse_repeated([run_a, run_b])  # a run against itself is no comparison: every difference would be zero
    a, b = (per_gpu(load_run(path)) for path in (run_a, run_b))
    notes = (check_comparable(a.info, b.info) + counter_notes(a.kernels, b.kernels)
             + iteration_notes({"A": (a.info, a.kernels), "B": (b.info, b.kernels)}))
    steps = step_split_table({"A": (a.info, a.kernels), "B": (b.info, b.kernels)})
    speedup = step_speedup(a.info, b.info)
    interval_a, interval_b = (step_interval(times) for times in step_samples(a, b))
    intervals = (interval_a, interval_b)
    categories = compare_categories_launches(a.kernels, b.kernels, intervals)
    peak_a, peak_b = (limits.bf16_tensor_tflops if limits else None for limits, _ in map(ceilings_of, (a, b)))
    peaks = (peak_a, peak_b)
    kernels, shifts = systematic_shifts(compare_launches(a.kernels, b.kernels, intervals), a.kernels, b.kernels,
                                        peaks)
    notes += shifts
    notes += [f"{label}: {note}" for label, run in (("A", a), ("B", b)) for note in roofline_notes(run)]
    text = render_compare(a.info, b.info, categories, kernels, notes, fmt, rooflines=rooflines(a, b), steps=steps,
                          provenance=(provenance(a.info, origin(run_a)), provenance(b.info, origin(run_b))),
                          findings=compare_findings(steps, categories, kernels, speedup))
    return write_output(text, output)


def step_samples(*runs: Run) -> list[list[float]]:
    """Each run's kept timed steps (ms)."""
    return [kept_steps(run.info) for run in runs]


def per_gpu(run: Run) -> Run:
    """The run as one GPU saw it: a multi-rank run's kernels of the rank its analyses describe
    (`communication.one_rank`), so that comparing or projecting it sets one GPU against one GPU."""
    return dataclasses.replace(run, kernels=one_rank(run.kernels, run.info))


def rooflines(*runs: Run) -> tuple[pd.DataFrame, ...] | None:
    """Each run's (from `load_run`) per-kernel roofline on its own GPU's ceilings (`ceilings_of`, as its report
    has them); None unless all have counters and ceilings."""
    ceilings = [limits for run in runs if (limits := ceilings_of(run)[0]) is not None]
    if len(ceilings) < len(runs) or not all(has_counters(run.kernels) for run in runs):
        return None
    return tuple(roofline_points(roofline(run.kernels, limits)) for run, limits in zip(runs, ceilings, strict=True))


def roofline_notes(run: Run) -> list[str]:
    """What a run's report says of its ceilings: a profile not applied, and launches faster than a ceiling."""
    ceilings, notes = ceilings_of(run)
    if ceilings is not None and has_counters(run.kernels):
        notes += [note for note in [defects_note(defects_by_kernel(calibration_defects(ceilings, run.kernels)))]
                  if note]
    return notes


def project(run: Path, to: str, check: Path | None = None) -> str:
    """`ssmprof project`: the run's per-category time projected onto GPU `to` (a datasheet key), as markdown;
    with `check`, a run measured on the target, the projection's error per category. Each side stands on its
    GPU's ceilings: the run's own (`ceilings_of`), the target model's device profile where one is bundled, else
    its datasheet row (`hardware.model_ceilings`)."""
    to = to.lower()  # the datasheet's keys are lower case; `H200` names the same GPU as `h200`
    if to not in SPECS:
        raise InvalidConfig(f"unknown target GPU '{to}'; choose from: {', '.join(SPECS)}")
    measured = per_gpu(load_run(run))
    source = ceilings_of(measured)[0]
    if source is None:
        raise InvalidConfig(f"no ceilings for the measured GPU ({measured.info.gpu.name}): not in the "
                            "datasheet table and no device profile of it")
    if not has_counters(measured.kernels):
        raise InvalidConfig(f"{run} has no counters: a projection needs each kernel's FLOPs and bytes (profile with "
                            "--counters sampled); nothing was projected")
    target = _check_run(check, measured.info, to)
    target_ceilings = model_ceilings(to)
    kernels = project_kernels(measured.kernels, source, target_ceilings)
    table = project_categories(kernels)
    checked = None
    if target is not None:
        errors = projection_error(table, target.kernels)
        checked = (target.info, errors, left_out(table, errors))
    step = project_step(measured.info, kernels, target.info if target is not None else None)
    return render_projection(measured.info, SPECS[to].name, table, step, checked,
                             (source.source, target_ceilings.source),
                             projection_limits(_spec_key(measured.info.gpu.name), to, check is not None))


def _check_run(check: Path | None, measured: RunInfo, to: str) -> Run | None:
    """The run `--check` names, loaded: of the projected workload and measured on the target GPU `to`, since a
    run of another GPU would score the projection against a GPU it never aimed at."""
    if check is None:
        return None
    target = per_gpu(load_run(check))
    check_comparable(measured, target.info)
    spec = spec_for(target.info.gpu.name)
    if spec is None or spec.key != to:
        raise InvalidConfig(f"--check {check} was measured on the {target.info.gpu.name}, not on the target "
                            f"{SPECS[to].name}")
    return target


# The architecture of each datasheet GPU, by the prefix of its key: a projection across architectures meets
# kernels the target does not have (Hopper's wgmma GEMMs and TMA loads), and other caches and clocks.
ARCHITECTURES = {"a100": "Ampere", "h100": "Hopper", "h200": "Hopper", "l40": "Ada Lovelace", "b100": "Blackwell",
                 "b200": "Blackwell", "gb200": "Blackwell"}
# Pairs of GPUs whose projections the bundled runs check (`ssmprof results`' projection check): the H100 and H200.
CHECKED_PAIRS = {frozenset(bundled.GPUS)}


def _spec_key(device_name: str) -> str:
    """The datasheet key of a GPU (its device name where the datasheet has none: an architecture not known)."""
    spec = spec_for(device_name)
    return device_name if spec is None else spec.key


def projection_limits(source: str, target: str, checked_here: bool) -> list[str]:
    """What a projection from GPU `source` to `target` (datasheet keys) cannot know, in sentences: across
    architectures, the kernels, L2 and clocks of the target; and whether it was ever checked against a run
    measured on the target."""
    notes = []
    arch = {key: next((a for prefix, a in ARCHITECTURES.items() if key.startswith(prefix)), "unknown")
            for key in (source, target)}
    if arch[source] != arch[target]:
        notes.append(f"Another architecture ({arch[source]} to {arch[target]}): the projection scales each measured "
                     "kernel by datasheet peaks only. It cannot know which kernels run there instead (Hopper's wgmma "
                     "GEMMs and TMA loads exist only on Hopper and later), the target's L2 size and bandwidth, its "
                     "clocks, or what its autotuners choose.")
    if not checked_here and frozenset((source, target)) not in CHECKED_PAIRS:
        notes.append(f"Never checked against a run measured on the {SPECS[target].name}: no such run is bundled "
                     "(give one with --check to see the error per category).")
    return notes


def write_output(text: str, output: Path | None) -> str:
    """Write `text` to `output` (its folder created) where one is given; returns the text either way."""
    if output is not None:
        write_text(output, text)
    return text


SUFFIXES = {".html": "html", ".htm": "html", ".md": "md", ".markdown": "md"}


def output_target(fmt: str | None, output: Path | None, default: str, page: str) -> tuple[str, Path | None]:
    """The format to write and where: the format asked for, else the output file's suffix (`-o x.html` is HTML),
    else `default`; the output file given, else for HTML (megabytes, plotly.js beside it) the file `page`, for
    markdown none (printed). Asked for one format and a file of the other suffix is one line, not a mislabelled
    file, and so is a suffix that names another format (`-o x.pdf`) with no format asked for: an HTML page in a
    .pdf opens nowhere."""
    implied = SUFFIXES.get(output.suffix.lower()) if output is not None else None
    if fmt is not None and implied is not None and fmt != implied:
        raise InvalidConfig(f"--format {fmt} does not match the output file {output} ({implied}): give one of them")
    if fmt is None and implied is None and output is not None and output.suffix:
        raise InvalidConfig(f"the output file {output} is neither .html nor .md: name one, or give --format")
    chosen = fmt or implied or default
    return chosen, output or (Path(page) if chosen == "html" else None)


def _check_format(fmt: str) -> None:
    if fmt not in FORMATS:
        raise InvalidConfig(f"--format must be html or md, got '{fmt}'")
