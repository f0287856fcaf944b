"""`ssmprof` command line. Thin: parse options, call the layers below, print. One error boundary."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from ssmprof.errors import InvalidConfig, NoGpu, SsmprofError

# Triton keeps autotuning results on disk beside its compiled kernels (read when mamba-ssm's kernels are
# defined, so set before any import of them): a rerun, the suite, or the counter child then skips the
# autotuning benchmarks (about a minute per paper-size workload) and repeats the same choices.
os.environ.setdefault("TRITON_CACHE_AUTOTUNING", "1")

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Characterize how Mamba-based SSMs train on NVIDIA GPUs.")
console = Console()
err_console = Console(stderr=True)


def error_boundary(command):
    """Typed errors from below become one line on stderr and exit code 1, never a traceback."""

    @functools.wraps(command)
    def guarded(*args, **kwargs):
        try:
            return command(*args, **kwargs)
        except SsmprofError as exc:
            err_console.print(f"[bold red]error:[/] {exc}", highlight=False, soft_wrap=True)
            raise typer.Exit(1) from None
        except KeyboardInterrupt:
            err_console.print("[bold red]interrupted[/]")
            raise typer.Exit(130) from None

    return guarded


@app.command()
@error_boundary
def workloads() -> None:
    """List the workloads of the suite and their presets."""
    from ssmprof.workloads.registry import WORKLOADS

    table = Table(title="ssmprof workloads")
    for column in ("workload", "preset", "batch x seq", "layers", "dtype", "notes"):
        table.add_column(column)
    for workload in WORKLOADS.values():
        for i, (preset, cfg) in enumerate(workload.presets.items()):
            table.add_row(workload.name if i == 0 else "", preset, f"{cfg.batch_size} x {cfg.seq_len}",
                          str(cfg.layers), cfg.dtype, workload.preset_notes.get(preset, ""),
                          end_section=i == len(workload.presets) - 1)
    console.print(table)
    for workload in WORKLOADS.values():
        console.print(f"[bold]{workload.name}[/] ({workload.unit}/s; kernels: {', '.join(workload.ops)}): "
                      f"{workload.description}", highlight=False)


@app.command()
@error_boundary
def doctor() -> None:
    """Show the software stack and which fused kernels are available here."""
    from ssmprof.kernels import Availability, software_versions

    versions = software_versions()
    have = Availability.probe()
    table = Table(title="ssmprof doctor", show_header=False)
    for name, version in versions.items():
        table.add_row(name, version or "[yellow]not installed[/]")
    for name, ok in vars(have).items():
        table.add_row(f"kernel: {name}", "[green]yes[/]" if ok else "[yellow]no[/]")
    console.print(table)
    if have.cuda and not (have.causal_conv1d and have.selective_scan):
        console.print("[yellow]fused CUDA extensions missing: run `make kernels`[/]")


def _parse_sets(pairs: list[str]) -> dict[str, str]:
    parsed = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise InvalidConfig(f"--set expects KEY=VALUE, got '{pair}'")
        parsed[key] = value
    return parsed


PresetOpt = Annotated[str, typer.Option(help="tiny (CPU), small (one GPU) or paper")]
DeviceOpt = Annotated[str, typer.Option(help="auto, cuda or cpu")]
StepsOpt = Annotated[int, typer.Option(help="timed training iterations")]
WarmupOpt = Annotated[int | None, typer.Option(help="untimed iterations first [default: 3 on GPU, 1 on CPU]")]
BatchOpt = Annotated[int | None, typer.Option(help="override the preset's batch size")]
SeqOpt = Annotated[int | None, typer.Option(help="override the preset's sequence length")]
LayersOpt = Annotated[int | None, typer.Option(help="override the preset's layer count")]
DtypeOpt = Annotated[str | None, typer.Option(help="autocast dtype: bf16 or fp32")]
SetOpt = Annotated[list[str] | None, typer.Option("--set", help="any other setting, KEY=VALUE")]
FallbackOpt = Annotated[bool, typer.Option(help="run on a GPU even if fused kernels are missing")]


def _prepare(workload, preset, device, warmup, batch_size, seq_len, layers, dtype, set_, allow_fallback):
    """Workload, preset config with overrides, kernel plan and warm-up count from the shared options."""
    from ssmprof.kernels import plan_kernels
    from ssmprof.profiler.harness import resolve_device
    from ssmprof.workloads.registry import get_workload

    chosen = get_workload(workload)
    overrides = _parse_sets(set_ or [])
    named = {"batch_size": batch_size, "seq_len": seq_len, "layers": layers, "dtype": dtype}
    overrides.update({k: v for k, v in named.items() if v is not None})
    cfg = chosen.config(preset, overrides)
    target = resolve_device(device)
    plan = plan_kernels(chosen.ops, target, allow_fallback, cfg.dtype)
    return chosen, cfg, plan, overrides, (3 if target == "cuda" else 1) if warmup is None else warmup


@app.command()
@error_boundary
def run(
    workload: Annotated[str, typer.Argument(help="workload name (see `ssmprof workloads`)")],
    preset: PresetOpt = "small",
    device: DeviceOpt = "auto",
    steps: StepsOpt = 10,
    warmup: WarmupOpt = None,
    batch_size: BatchOpt = None,
    seq_len: SeqOpt = None,
    layers: LayersOpt = None,
    dtype: DtypeOpt = None,
    set_: SetOpt = None,
    allow_fallback: FallbackOpt = False,
    json_out: Annotated[Path | None, typer.Option("--json", help="also write the result as JSON")] = None,
) -> None:
    """Train WORKLOAD for a few iterations and print step time, throughput, memory and kernels used."""
    from ssmprof.profiler.harness import run_training
    from ssmprof.profiler.markers import NvtxMarker

    chosen, cfg, plan, _, warmup = _prepare(workload, preset, device, warmup, batch_size, seq_len, layers, dtype,
                                            set_, allow_fallback)
    with _progress() as report:
        result = run_training(chosen, preset, cfg, plan, steps, warmup, NvtxMarker(), report)
    _print_result(result)
    if json_out is not None:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(json.dumps(result.to_dict(), indent=2))


@app.command()
@error_boundary
def profile(
    workload: Annotated[str, typer.Argument(help="workload name (see `ssmprof workloads`)")],
    out: Annotated[Path, typer.Option(help="folder the run directory is created in")] = Path("runs"),
    preset: PresetOpt = "small",
    steps: StepsOpt = 10,
    warmup: WarmupOpt = None,
    batch_size: BatchOpt = None,
    seq_len: SeqOpt = None,
    layers: LayersOpt = None,
    dtype: DtypeOpt = None,
    set_: SetOpt = None,
    allow_fallback: FallbackOpt = False,
    counters: Annotated[str, typer.Option(help="Nsight Compute counters: sampled (one launch per launch "
                                          "configuration), all (every launch) or none (timeline only)")] = "sampled",
    keep_report: Annotated[bool, typer.Option(help="keep the Nsight Compute reports and the "
                                                          "timeline's trace in the run directory")] = False,
    ncu_timeout: Annotated[float, typer.Option(help="seconds the Nsight Compute child may take")] = 1800,
    report_file: Annotated[Path | None, typer.Option("--report", help="also write the HTML report here")] = None,
) -> None:
    """Profile one training iteration of WORKLOAD on the GPU into a run directory (run.json + kernels.parquet)."""
    from ssmprof.profiler.collect import profile_run

    if counters not in ("sampled", "all", "none"):
        raise InvalidConfig(f"--counters must be sampled, all or none, got '{counters}'")
    chosen, cfg, plan, overrides, warmup = _prepare(workload, preset, "auto", warmup, batch_size, seq_len, layers,
                                                    dtype, set_, allow_fallback)
    with _progress() as report:
        path = profile_run(chosen, preset, cfg, plan, overrides, out, steps, warmup, counters, allow_fallback,
                           keep_report, ncu_timeout, report)
    console.print(f"run directory: {path}")
    if report_file is not None:
        from ssmprof.reports.render import render_html

        _emit(render_html(_analyze_runs([path], None)[0]), report_file)


@app.command()
@error_boundary
def suite(
    out: Annotated[Path, typer.Option(help="folder for the run directories and the combined report")] = Path("runs"),
    preset: PresetOpt = "paper",
    workloads_: Annotated[str | None, typer.Option("--workloads", help="comma-separated subset "
                                                   "[default: the whole suite]")] = None,
    counters: Annotated[str, typer.Option(help="sampled, all or none")] = "sampled",
    steps: StepsOpt = 5,
) -> None:
    """Profile every workload of the suite and write one combined report (suite-report.html)."""
    import time

    from ssmprof.kernels import plan_kernels
    from ssmprof.profiler.collect import profile_run
    from ssmprof.profiler.harness import resolve_device
    from ssmprof.workloads.registry import SUITE, get_workload

    chosen = [get_workload(name.strip()) for name in workloads_.split(",")] if workloads_ else list(SUITE)
    if counters not in ("sampled", "all", "none"):
        raise InvalidConfig(f"--counters must be sampled, all or none, got '{counters}'")
    if resolve_device("auto") != "cuda":
        raise NoGpu("the suite profiles GPU kernels: no CUDA GPU is visible")
    started, paths = time.perf_counter(), []
    for workload in chosen:
        cfg = workload.config(preset)
        plan = plan_kernels(workload.ops, "cuda", False, cfg.dtype)
        console.print(f"[bold]{workload.name}[/] --preset {preset}")
        with _progress() as tell:
            paths.append(profile_run(workload, preset, cfg, plan, {}, out, steps, 3, counters, progress=tell))
    report(paths, output=out / "suite-report.html", format_="html", csv=out / "suite-csv", device_profile=None)
    console.print(f"suite of {len(paths)} workloads in {time.perf_counter() - started:.0f} s")


@app.command()
@error_boundary
def calibrate(
    out: Annotated[Path | None, typer.Option(help="device profile to write [default: runs/device-<gpu>.json]")] = None,
    ncu_timeout: Annotated[float, typer.Option(help="seconds the Nsight Compute child may take")] = 900,
    keep_report: Annotated[Path | None, typer.Option(help="copy the calibration .ncu-rep here")] = None,
) -> None:
    """Check the counter formulas on kernels of known work and measure this GPU's ceilings."""
    from ssmprof.analysis.calibration import evaluate
    from ssmprof.profiler.calibrate import KNOWN_WORK, run_calibration
    from ssmprof.profiler.gpu_specs import spec_for
    from ssmprof.profiler.harness import gpu_info

    with console.status("calibrating (ceilings, then Nsight Compute on known kernels)"):
        measured, ceilings, ncu_wall = run_calibration(ncu_timeout, keep_report)
    checks = evaluate(measured, KNOWN_WORK)
    gpu = gpu_info()
    spec = spec_for(gpu["name"])
    table = Table(title=f"calibration on {gpu['name']}")
    for column in ("check", "kernel", "expected", "measured", "error %", "result"):
        table.add_column(column)
    for row in checks.itertuples():
        table.add_row(row.check, row.kernel, f"{row.expected:.4g}", f"{row.measured:.4g}", f"{row.error_pct:.3f}",
                      "[green]pass[/]" if row.passed else "[red]FAIL[/]")
    console.print(table)
    datasheet = {"dram_gb_s": spec.dram_tb_s * 1e3, "bf16_tensor_tflops": spec.bf16_tflops,
                 "fp32_tflops": spec.fp32_tflops} if spec else {}
    for key, value in ceilings.items():
        if key != "source":
            share = f" ({value / datasheet[key]:.0%} of datasheet)" if key in datasheet else ""
            console.print(f"{key}: {value:,.1f}{share}")
    path = out or Path("runs") / f"device-{(spec.key if spec else gpu['name']).replace(' ', '_')}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"gpu": gpu, "measured": ceilings, "datasheet": datasheet,
                                "checks": checks.to_dict("records"), "ncu_wall_s": ncu_wall}, indent=2))
    console.print(f"device profile: {path}")
    if not checks["passed"].all():
        failed = ", ".join(checks.loc[~checks["passed"], "check"])
        raise SsmprofError(f"calibration checks failed: {failed}")


@app.command()
@error_boundary
def report(
    runs: Annotated[list[Path], typer.Argument(help="run directories written by `ssmprof profile`")],
    output: Annotated[Path | None, typer.Option("-o", "--output", help="file to write [default: print]")] = None,
    format_: Annotated[str, typer.Option("--format", help="html or md")] = "html",
    csv: Annotated[Path | None, typer.Option(help="also write every table as CSV into this folder")] = None,
    device_profile: Annotated[Path | None, typer.Option(help="ceilings measured by `ssmprof calibrate` "
                                                        "[default: the GPU's datasheet]")] = None,
) -> None:
    """Analyze run directories and write the report (HTML with charts, or markdown); several runs get a
    suite overview first (category shares per workload, the SSM kernels of all of them)."""
    from ssmprof.reports.render import render_html, render_markdown

    if format_ not in ("html", "md"):
        raise InvalidConfig(f"--format must be html or md, got '{format_}'")
    analyzed, overview = _analyze_runs(runs, device_profile, csv)
    text = render_html(analyzed, overview) if format_ == "html" else render_markdown(analyzed, overview)
    _emit(text, output)


def _analyze_runs(paths: list[Path], device_profile: Path | None, csv: Path | None = None):
    """(info, tables, warnings) per run, and the suite overview where there are several runs."""
    from ssmprof.analysis import suite
    from ssmprof.analysis.roofline import Ceilings
    from ssmprof.analysis.summary import analyze, warnings_for
    from ssmprof.profiler.gpu_specs import spec_for
    from ssmprof.reports.render import write_csv
    from ssmprof.schema import read_run

    measured = _read_device_profile(device_profile) if device_profile else None
    analyzed, kernels, infos, ceilings = [], {}, {}, {}
    for index, path in enumerate(paths):
        run = read_run(path)
        spec = spec_for(run.info["gpu"]["name"])
        limits = Ceilings.from_profile(measured) if measured else Ceilings.from_datasheet(spec) if spec else None
        tables = analyze(run, limits)
        if csv is not None:
            write_csv(tables, csv, f"{index}-" if len(paths) > 1 else "")
        analyzed.append((run.info, tables, warnings_for(run)))
        label = run.info["workload"]["name"]
        label = label if label not in kernels else f"{label} ({run.info['gpu']['name']}, #{index})"
        kernels[label], infos[label], ceilings[label] = run.kernels, run.info, limits
    if len(paths) < 2:
        return analyzed, None
    measured_roofs = {label: limits for label, limits in ceilings.items() if limits is not None}
    overview = {"step_times": suite.step_times(infos), "category_shares": suite.category_shares(kernels),
                "ssm_kernels": suite.ssm_kernels({k: kernels[k] for k in measured_roofs}, measured_roofs),
                "ssm_roofline": suite.ssm_roofline({k: kernels[k] for k in measured_roofs}, measured_roofs)}
    if csv is not None:
        write_csv({k: v for k, v in overview.items() if k != "ssm_roofline"}, csv, "suite-")
    return analyzed, overview


@app.command()
@error_boundary
def reference(
    out: Annotated[Path, typer.Option(help="folder for the reports")] = Path("runs/reference"),
) -> None:
    """Render the reference runs bundled with ssmprof (the paper suite on an H100 and an H200): one suite
    report per GPU and an H100-vs-H200 comparison per workload. Needs no GPU."""
    from ssmprof import bundled
    from ssmprof.analysis.compare import check_comparable, compare_categories, compare_kernels
    from ssmprof.reports.render import render_compare, render_html
    from ssmprof.schema import read_run

    out.mkdir(parents=True, exist_ok=True)
    written = []
    for gpu in bundled.GPUS:
        analyzed, overview = _analyze_runs(bundled.runs(gpu), bundled.device_profile(gpu))
        written.append(out / f"suite-{gpu}.html")
        written[-1].write_text(render_html(analyzed, overview))
    first, second = bundled.GPUS
    for path_a, path_b in zip(bundled.runs(first), bundled.runs(second), strict=True):
        a, b = read_run(path_a), read_run(path_b)
        written.append(out / f"compare-{path_a.name}-{first}-vs-{second}.html")
        written[-1].write_text(render_compare(a.info, b.info, compare_categories(a.kernels, b.kernels),
                                              compare_kernels(a.kernels, b.kernels), check_comparable(a.info, b.info),
                                              "html", rooflines=_rooflines(a, b)))
    console.print(f"These are BUNDLED measurements (paper suite on an {bundled.GPUS[first]} and an "
                  f"{bundled.GPUS[second]}, shipped in {bundled.REFERENCE}), not measurements of this machine.")
    console.print("To profile your own GPU: make install && make kernels && make profile "
                  "(or: ssmprof suite --preset paper).")
    for path in written:
        console.print(f"written: {path}")


@app.command()
@error_boundary
def results(
    readme: Annotated[Path | None, typer.Option(help="replace the Results section of this README in place "
                                                "[default: print it]")] = None,
) -> None:
    """The README's Results section, generated from the bundled reference runs."""
    import pandas as pd

    from ssmprof import bundled
    from ssmprof.analysis import suite
    from ssmprof.analysis.roofline import Ceilings
    from ssmprof.profiler.gpu_specs import SPECS
    from ssmprof.reports.render import RESULTS_END, RESULTS_START, render_results
    from ssmprof.schema import read_run

    first, second = bundled.GPUS
    loaded = {gpu: {path.name: read_run(path) for path in bundled.runs(gpu)} for gpu in bundled.GPUS}
    kernels = {gpu: {w: run.kernels for w, run in loaded[gpu].items()} for gpu in loaded}
    infos = {gpu: {w: run.info for w, run in loaded[gpu].items()} for gpu in loaded}
    measured = Ceilings.from_profile(_read_device_profile(bundled.device_profile(first)))
    datasheet = {gpu: Ceilings.from_datasheet(SPECS[gpu]) for gpu in bundled.GPUS}
    steps = pd.concat([suite.step_times(infos[gpu]).assign(gpu=bundled.GPUS[gpu]) for gpu in bundled.GPUS],
                      ignore_index=True)
    text = render_results(
        (bundled.GPUS[first], bundled.GPUS[second]), steps,
        suite.category_shares(kernels[first]),
        suite.ssm_kernels(kernels[first], dict.fromkeys(kernels[first], measured)),
        suite.gpu_pair(kernels[first], kernels[second], infos[first], infos[second]),
        suite.projection_errors(kernels[first], kernels[second], datasheet[first], datasheet[second]))
    if readme is None:
        sys.stdout.write(text)
        return
    current = readme.read_text()
    if RESULTS_START not in current or RESULTS_END not in current:
        raise InvalidConfig(f"{readme} has no {RESULTS_START} ... {RESULTS_END} section to replace")
    head, rest = current.split(RESULTS_START, 1)
    readme.write_text(head + text + rest.split(RESULTS_END, 1)[1].lstrip("\n"))
    console.print(f"results written into {readme}")


@app.command()
@error_boundary
def compare(
    run_a: Annotated[Path, typer.Argument(help="run directory A")],
    run_b: Annotated[Path, typer.Argument(help="run directory B")],
    output: Annotated[Path | None, typer.Option("-o", "--output", help="file to write [default: print]")] = None,
    format_: Annotated[str, typer.Option("--format", help="html or md")] = "md",
) -> None:
    """Compare two runs of one workload (e.g. H100 vs H200): categories and kernels matched by launch config."""
    from ssmprof.analysis.compare import check_comparable, compare_categories, compare_kernels
    from ssmprof.reports.render import render_compare
    from ssmprof.schema import read_run

    if format_ not in ("html", "md"):
        raise InvalidConfig(f"--format must be html or md, got '{format_}'")
    a, b = read_run(run_a), read_run(run_b)
    notes = check_comparable(a.info, b.info)
    text = render_compare(a.info, b.info, compare_categories(a.kernels, b.kernels),
                          compare_kernels(a.kernels, b.kernels), notes, format_, rooflines=_rooflines(a, b))
    _emit(text, output)


def _rooflines(*runs):
    """Each run's per-kernel roofline on its own GPU's datasheet ceilings; None unless all have counters
    and known GPUs."""
    from ssmprof.analysis.roofline import Ceilings, roofline
    from ssmprof.profiler.gpu_specs import spec_for

    specs = [spec_for(run.info["gpu"]["name"]) for run in runs]
    if None in specs or not all(run.kernels["ncu_duration_ns"].notna().any() for run in runs):
        return None
    return tuple(roofline(run.kernels, Ceilings.from_datasheet(spec)) for run, spec in zip(runs, specs, strict=True))


@app.command()
@error_boundary
def baseline(
    runs: Annotated[list[Path], typer.Argument(help="repeated runs of one configuration")],
    output: Annotated[Path, typer.Option("-o", "--output", help="baseline file to write")] = Path("baseline.json"),
) -> None:
    """Build a noise-aware kernel-efficiency baseline from repeated runs."""
    from ssmprof.analysis.compare import check_comparable
    from ssmprof.analysis.regress import build_baseline, save_baseline
    from ssmprof.schema import read_run

    loaded = [read_run(path) for path in runs]
    for other in loaded[1:]:
        check_comparable(loaded[0].info, other.info)
    table = build_baseline([run.kernels for run in loaded])
    save_baseline(table, loaded[0].info, output)
    console.print(f"baseline of {len(loaded)} runs, {len(table)} kernel metrics: {output}")


@app.command()
@error_boundary
def regress(
    runs: Annotated[list[Path], typer.Argument(help="run directories to check")],
    baseline_file: Annotated[Path, typer.Option("--baseline", help="from `ssmprof baseline`")],
    junit: Annotated[Path | None, typer.Option(help="also write a JUnit XML summary here")] = None,
    summary: Annotated[Path | None, typer.Option(help="also write the markdown summary here")] = None,
    min_effect: Annotated[float, typer.Option(help="smallest relative change that counts")] = 0.05,
    sigmas: Annotated[float, typer.Option(help="noise band, in baseline standard deviations")] = 3.0,
    min_time_ns: Annotated[float, typer.Option(help="smallest change of time per launch that counts (ns)")] = 1000,
    min_impact: Annotated[float, typer.Option(help="smallest share of the iteration's kernel time a slower "
                                              "kernel must cost")] = 0.001,
) -> None:
    """Exit 1 if any kernel got less efficient than the baseline allows (markdown on stdout)."""
    import pandas as pd

    from ssmprof.analysis.regress import load_baseline, regressions
    from ssmprof.reports.gate import gate_junit, gate_markdown
    from ssmprof.schema import read_run

    table, document = load_baseline(baseline_file)
    results = []
    for path in runs:
        run = read_run(path)
        if run.info["workload"]["name"] != document["workload"]["name"]:
            raise InvalidConfig(f"{path} is a {run.info['workload']['name']} run, the baseline is of "
                                f"{document['workload']['name']}")
        results.append(regressions(table, run.kernels, min_effect, sigmas, min_time_ns, min_impact))
    checked = pd.concat(results, ignore_index=True)
    text = gate_markdown(checked)
    sys.stdout.write(text)
    if summary is not None:
        summary.write_text(text)
    if junit is not None:
        junit.write_text(gate_junit(checked))
    if checked["regressed"].any():
        raise typer.Exit(1)


@app.command()
@error_boundary
def project(
    run: Annotated[Path, typer.Argument(help="a measured run directory")],
    to: Annotated[str, typer.Option(help="target GPU: a key of the datasheet table (h100-sxm, h200, a100-80gb, ...)")],
    check: Annotated[Path | None, typer.Option(help="a run of the same workload measured on the target: "
                                               "report the projection's error per category")] = None,
) -> None:
    """Project a run's per-kernel and per-category time onto another GPU (a projection, labelled as such)."""
    from ssmprof.analysis.categories import with_categories
    from ssmprof.analysis.compare import check_comparable
    from ssmprof.analysis.project import project as project_run
    from ssmprof.analysis.project import project_categories, projection_error
    from ssmprof.analysis.roofline import Ceilings
    from ssmprof.profiler.gpu_specs import SPECS, spec_for
    from ssmprof.reports.render import render_projection
    from ssmprof.schema import read_run

    if to not in SPECS:
        raise InvalidConfig(f"unknown target GPU '{to}'; choose from: {', '.join(SPECS)}")
    measured = read_run(run)
    source = spec_for(measured.info["gpu"]["name"])
    if source is None:
        raise InvalidConfig(f"no datasheet entry for the measured GPU ({measured.info['gpu']['name']})")
    table = project_categories(project_run(measured.kernels, Ceilings.from_datasheet(source),
                                           Ceilings.from_datasheet(SPECS[to])))
    checked = None
    if check is not None:
        target = read_run(check)
        check_comparable(measured.info, target.info)
        checked = (target.info, projection_error(table, with_categories(target.kernels)))
    sys.stdout.write(render_projection(measured.info, SPECS[to].name, table, checked))


def _emit(text: str, output: Path | None) -> None:
    if output is None:
        sys.stdout.write(text)
    else:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(text)
        console.print(f"written: {output}")


def _read_device_profile(path: Path) -> dict:
    try:
        return json.loads(path.read_text())["measured"]
    except (OSError, ValueError, KeyError) as exc:
        raise InvalidConfig(f"cannot read device profile {path}: {exc}") from None


@contextlib.contextmanager
def _progress():
    """A rich progress bar (on a terminal); yields the `report(stage, done, total)` callback."""
    bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                   console=err_console, transient=True, disable=not sys.stderr.isatty())
    tasks: dict[str, int] = {}

    def report(stage: str, done: int, total: int) -> None:
        if stage not in tasks:
            tasks[stage] = bar.add_task(stage, total=total)
        bar.update(tasks[stage], completed=done)

    with bar:
        yield report


def _print_result(result) -> None:
    times = result.step_times_ms
    table = Table(title=f"{result.workload} --preset {result.preset} on {result.gpu.get('name', result.device)}",
                  show_header=False)
    table.add_row("step time (median)", f"{result.step_ms:.2f} ms  (min {min(times):.2f}, max {max(times):.2f}, "
                  f"{len(times)} steps after {result.warmup} warm-up)")
    table.add_row("throughput", f"{result.throughput:,.0f} {result.unit}/s")
    peak = result.peak_memory_bytes
    table.add_row("peak memory", f"{peak / 2**30:.2f} GiB" if peak is not None else "n/a (CPU)")
    table.add_row("final loss", f"{result.final_loss:.4f}")
    for op, impl in result.provenance.items():
        table.add_row(f"kernel: {op}", impl)
    console.print(table)
