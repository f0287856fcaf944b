"""`ssmprof` command line. Thin: parse options, call the layers below, print. One error boundary."""

from __future__ import annotations

import contextlib
import functools
import re
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

import typer
import typer.core
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from ssmprof.errors import SsmprofError

# --help text, as click wraps it, held together: a value is never broken at a hyphen ("WORKLOAD-" / "PRESET-TIME")
# nor a `quoted command` at its spaces, and a value's metavar is a word (RUN_DIR..., --out PATH), not typer's
# `<list[Path]>`. Both by the formatter alone, so every command (and any added later) gets them. The bases are
# typer's own (click, or the copy of it typer vendors from 0.2x), never an `import click` of another version.
_BaseContext = typer.core.TyperGroup.context_class
# private-use stand-ins for "-" and " ", one column each like the originals, put back once the text is wrapped
_HYPHEN, _SPACE = "\ue000", "\ue001"
_PUT_BACK = str.maketrans({_HYPHEN: "-", _SPACE: " "})
_TYPES = {"str": "TEXT", "int": "INTEGER", "float": "NUMBER", "path": "PATH", "Path": "PATH", "bool": "BOOLEAN"}


def _unbreakable(text: str) -> str:
    """`text` with its hyphens, and the spaces inside `backticks`, no longer places to break a line."""
    parts = text.split("`")
    return "`".join(part.replace(" ", _SPACE) if i % 2 else part for i, part in enumerate(parts)).replace("-", _HYPHEN)


def _human_metavar(term: str) -> str:
    """A help row's name column as a person writes it: "RUN_DIR <list[Path]>" -> "RUN_DIR...", "WORKLOAD <str>" ->
    "WORKLOAD", "--out <path>" -> "--out PATH", "--set <list[str]>" -> "--set TEXT" (repeatable, as its help says)."""
    name, _, shown = term.partition(" <")
    if not shown.endswith(">"):
        return term
    shown = shown[:-1]
    many = shown.startswith("list[") and shown.endswith("]")
    shown = shown[5:-1] if many else shown
    if not name.startswith("-"):  # an argument: its metavar is its name already
        return f"{name}..." if many else name
    return f"{name} {_TYPES.get(shown, '[' + shown + ']' if '|' in shown else shown.upper())}"


class _HelpFormatter(_BaseContext.formatter_class):  # type: ignore[name-defined]
    def write_usage(self, prog: str, args: str = "", prefix: str | None = None) -> None:
        args = re.sub(r"\{([A-Z_]+)\}", r"\1", args)  # typer's "{RUN_DIR}...": a required argument is plain
        super().write_usage(_unbreakable(prog), _unbreakable(args), prefix)

    def write_text(self, text: str) -> None:
        super().write_text(_unbreakable(text))

    def write_dl(self, rows: Sequence[tuple[str, str]], col_max: int = 30, col_spacing: int = 2) -> None:
        super().write_dl([(_unbreakable(_human_metavar(term)), _unbreakable(text)) for term, text in rows],
                         col_max, col_spacing)

    def getvalue(self) -> str:
        return super().getvalue().translate(_PUT_BACK)


class _Context(_BaseContext):  # type: ignore[valid-type,misc]
    formatter_class = _HelpFormatter


class _Group(typer.core.TyperGroup):
    """The app's group: every command's context formats its help with `_HelpFormatter`."""

    context_class = _Context

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for command in self.commands.values():
            command.context_class = _Context


app = typer.Typer(add_completion=False, no_args_is_help=True, rich_markup_mode=None, cls=_Group,
                  help="Characterize how Mamba-based SSMs train on NVIDIA GPUs.")
# Markup off: every message holds paths, names and values the user typed ("runs[/]x", "r[bold]66.html"), and a
# bracket in them is text, never a style tag. Colour comes only from `Text` styles (`_say`, `_styled`).
console = Console(markup=False, highlight=False)
err_console = Console(stderr=True, markup=False, highlight=False)


def _say(*parts: str | tuple[str, str], err: bool = False) -> None:
    """One message as one line (never wrapped at the terminal's width): plain strings, or (text, style) pairs."""
    (err_console if err else console).print(Text.assemble(*parts), soft_wrap=True)


def _styled(text: str, style: str) -> Text:
    return Text(text, style=style)


def _version(shown: bool) -> None:
    if shown:
        from importlib.metadata import version

        _say(f"ssmprof {version('ssmprof')}")
        raise typer.Exit()


@app.callback()
def main(
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                          help="print the version and exit")] = False,
) -> None:
    """Characterize how Mamba-based SSMs train on NVIDIA GPUs."""


def error_boundary(command):
    """Typed errors from below become one line on stderr and exit code 1, never a traceback."""

    @functools.wraps(command)
    def guarded(*args, **kwargs):
        try:
            return command(*args, **kwargs)
        except SsmprofError as exc:
            _say(("error: ", "bold red"), " ".join(str(exc).split()), err=True)
            raise typer.Exit(1) from None
        except OSError as exc:  # a path the checks below let through (a name too long, a device gone): one line
            where = f"{exc.filename}: " if exc.filename else ""
            _say(("error: ", "bold red"), f"{where}{exc.strerror or exc}", err=True)
            raise typer.Exit(1) from None
        except KeyboardInterrupt:
            _say(("interrupted", "bold red"), err=True)
            raise typer.Exit(130) from None

    return guarded


@app.command()
@error_boundary
def workloads() -> None:
    """List the workloads of the suite and their presets."""
    import textwrap

    from ssmprof.workloads.registry import LISTED as WORKLOADS

    # One block a workload, never a table: its full name on a line of its own (a column cut "hf:granite-4.0-hybrid"
    # at 80 columns), its description wrapped under it, then a line a preset; nothing wider than the terminal.
    width = max(40, min(console.width, 100))
    _say(("ssmprof workloads", "bold"), ": a preset a line (batch x seq, layers, dtype, notes)")
    for workload in WORKLOADS.values():
        _say("")
        about = f"({workload.unit}/s; kernels: {', '.join(workload.ops)})"
        if len(workload.name) + 2 + len(about) <= width:
            _say((workload.name, "bold"), f"  {about}")
        else:
            _say((workload.name, "bold"))
            _say(f"  {about}")
        for line in textwrap.wrap(workload.description, width, initial_indent="  ", subsequent_indent="  ",
                                  break_on_hyphens=False):
            _say(line)
        label = max(len(preset) for preset in workload.presets)
        for preset, cfg in workload.presets.items():
            shape = f"{cfg.batch_size} x {cfg.seq_len}"
            head = f"  - {preset:<{label}}  {shape:<11} {cfg.layers:>3} layers  {cfg.dtype:<4}"
            note = workload.preset_notes.get(preset, "")
            lines = textwrap.wrap(note, width, initial_indent=f"{head}  ", subsequent_indent=" " * (len(head) + 2),
                                  break_on_hyphens=False) if note and len(head) + 22 <= width else [head]
            if note and len(head) + 22 > width:  # too narrow for the note beside the shape: under it
                lines += textwrap.wrap(note, width, initial_indent=" " * 6, subsequent_indent=" " * 6,
                                       break_on_hyphens=False)
            for line in lines:
                _say(line)


@app.command()
@error_boundary
def doctor() -> None:
    """Show the software stack and which fused kernels are available here."""
    from ssmprof.pipeline.doctor import doctor as checkup

    found = checkup()
    have = found.kernels
    table = Table(title="ssmprof doctor", show_header=False)
    for name, version in found.versions.items():
        table.add_row(name, version or _styled("not installed", "yellow"))
    if have.cuda:
        table.add_row("GPU", f"{found.gpu['name']} (compute capability {found.gpu['compute_capability']})")
    # the kernels' rows: bool fields only (the versions are above); without a GPU none runs, and the row says why
    unusable = "" if have.cuda else " (no CUDA GPU here)"
    for name, ok in vars(have).items():
        if isinstance(ok, bool) and name != "cuda":
            table.add_row(f"usable: {name}", _styled("yes", "green") if ok else _styled(f"no{unusable}", "yellow"))
    console.print(table)
    if have.cuda and not (have.causal_conv1d and have.selective_scan):
        _say(("fused CUDA extensions missing: run `make kernels` (or `make profile`, which builds them first)",
              "yellow"))


HistoryOpt = Annotated[Path | None, typer.Option(help="append the run(s) to this history folder (see `ssmprof "
                                                "history`)")]
CommitOpt = Annotated[str | None, typer.Option(help="the commit the run(s) measured, for the history [default: "
                                               "$GITHUB_SHA or `git rev-parse HEAD`]")]
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
TpOpt = Annotated[int, typer.Option("--tp", help="tensor-parallel ranks (one GPU each; gloo processes on the CPU)")]
DpOpt = Annotated[int, typer.Option("--dp", help="data-parallel replicas of the tensor-parallel model")]
SpOpt = Annotated[bool, typer.Option(help="sequence parallelism under --tp (mamba-ssm's default)")]
GraphsOpt = Annotated[bool, typer.Option(help="also time the step as one CUDA graph, --tp/--dp collectives "
                                              "inside (no per-launch host cost); refused, with the reason, where it "
                                              "cannot be captured")]


@app.command()
@error_boundary
def run(
    workload: Annotated[str, typer.Argument(metavar="WORKLOAD", help="workload name (see `ssmprof workloads`)")],
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
    tp: TpOpt = 1,
    dp: DpOpt = 1,
    sequence_parallel: SpOpt = True,
    cuda_graphs: GraphsOpt = False,
) -> None:
    """Train WORKLOAD for a few iterations and print step time, throughput, memory and kernels used."""
    from ssmprof.pipeline import measure

    options = measure.WorkloadOptions(workload, preset, warmup, batch_size, seq_len, layers, dtype, set_ or [],
                                      allow_fallback, tp, dp, sequence_parallel)
    with _progress() as report:
        result = measure.train(options, device, steps, json_out, report, cuda_graphs=cuda_graphs)
    _print_result(result)


@app.command(context_settings={"allow_extra_args": True})
@error_boundary
def profile(
    ctx: typer.Context,
    workload: Annotated[str | None, typer.Argument(metavar="WORKLOAD",
                                                   help="workload name (see `ssmprof workloads`)")] = None,
    script: Annotated[Path | None, typer.Option(help="a marked training script instead (--script train.py -- "
                                                "ARGS)")] = None,
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
    counters: Annotated[str, typer.Option(help="ncu counters: sampled (a launch per configuration or grid bin), "
                                          "all, focus (SSM and 5 longest kernels) or none")] = "sampled",
    keep_report: Annotated[bool, typer.Option(help="keep the ncu reports and the trace in the run "
                                                          "directory")] = False,
    ncu_timeout: Annotated[float, typer.Option(help="seconds the Nsight Compute child may take")] = 1800,
    report_file: Annotated[Path | None, typer.Option("--report", help="also write the HTML report here")] = None,
    tp: TpOpt = 1,
    dp: DpOpt = 1,
    sequence_parallel: SpOpt = True,
    ncu_rank: Annotated[list[int] | None, typer.Option(help="with --tp/--dp: a rank Nsight Compute profiles; "
                                                       "repeat it for several (one per node or TP group)")] = None,
    device: Annotated[str, typer.Option(help="auto or cuda; cpu (timeline only) with --tp/--dp or "
                                             "--script")] = "auto",
    nnodes: Annotated[int, typer.Option(help="with --tp/--dp: nodes of the torchrun job (run this command on "
                                             "each, --out on a shared filesystem)")] = 1,
    node_rank: Annotated[int, typer.Option(help="this node's number, 0 to --nnodes - 1 (node 0 writes the "
                                                "run)")] = 0,
    rdzv_endpoint: Annotated[str | None, typer.Option(help="HOST:PORT of the rendezvous (node 0), several "
                                                           "nodes")] = None,
    job_id: Annotated[str, typer.Option(help="names the rendezvous and the ranks' shared folder: the same on "
                                             "every node (e.g. $SLURM_JOB_ID)")] = "ssmprof",
    pass_gpus: Annotated[int, typer.Option(help="spread a single-GPU profile's counter passes over N identical "
                                                "GPUs (0: all)")] = 0,
    budget: Annotated[float | None, typer.Option(help="seconds the counter passes may take (the plan checking the "
                                                 "most kernel time)")] = None,
    name: Annotated[str | None, typer.Option(help="the run directory's name [default: "
                                             "WORKLOAD-PRESET-TIME]")] = None,
    replay: Annotated[str, typer.Option(help="ncu replay: kernel, application (a rerun per pass) or "
                                        "auto (application where live tensors exceed half the GPU)")] = "auto",
    ncu_cache: Annotated[str, typer.Option(help="flush (default) or keep caches per ncu pass",
                                           show_default=False)] = "flush",
    autotune_from: Annotated[Path | None, typer.Option(help="pin this run's Triton tile choices")] = None,
    cuda_graphs: GraphsOpt = False,
    history: HistoryOpt = None,
    commit: CommitOpt = None,
) -> None:
    """Profile one training iteration of WORKLOAD (or of a marked training script) on the GPU into a run directory
    (run.json + kernels.parquet)."""
    from ssmprof.pipeline import measure

    shaping = {"--batch-size": batch_size, "--seq-len": seq_len, "--layers": layers, "--dtype": dtype, "--set": set_,
               "--tp": tp != 1, "--dp": dp != 1, "--cuda-graphs": cuda_graphs}
    target = _check_target(workload, script, ctx.args, shaping)
    options = measure.WorkloadOptions(target, preset, warmup, batch_size, seq_len, layers, dtype, set_ or [],
                                      allow_fallback, tp, dp, sequence_parallel)
    settings = measure.ProfileSettings(out=out, steps=steps, counters=counters, replay=replay, ncu_cache=ncu_cache,
                                       ncu_timeout_s=ncu_timeout, ncu_ranks=tuple(ncu_rank or [0]),
                                       pass_gpus=pass_gpus, cuda_graphs=cuda_graphs, keep_report=keep_report,
                                       name=name, autotune_from=autotune_from, budget_s=budget)
    launch = measure.Launch(nnodes, node_rank, rdzv_endpoint, job_id)
    request = measure.ProfileRequest(options, settings, device, launch, report_file, history)
    with _progress() as report:
        path = measure.profile(request, report) if script is None else measure.profile_script(
            script, [*([workload] if workload else []), *ctx.args], settings, device, warmup, report_file, report,
            history)
    if path is None:
        _say(f"node {node_rank}: its ranks are done; node 0 writes the run directory")
        return
    _say(f"run directory: {path}")
    if report_file is not None:
        _say(f"written: {_listed(report_file)}")
    _append_history([path], history, commit)


def _check_target(workload: str | None, script: Path | None, extra: list[str], shaping: dict) -> str:
    """One WORKLOAD, or a --script with its arguments (the positional words, after --) and none of the options
    that shape a suite workload (`shaping`: flag -> given). Returns what is profiled: the workload's name, or the
    script's path."""
    from ssmprof.errors import InvalidConfig

    if script is None:
        if workload is None or extra:
            raise InvalidConfig("give one WORKLOAD (see `ssmprof workloads`), or --script train.py -- ARGS" +
                                (f"; unexpected: {' '.join(extra)}" if extra else ""))
        return workload
    given = [flag for flag, value in shaping.items() if value]
    if given:
        raise InvalidConfig(f"--script runs the script as it is: {', '.join(given)} shape a suite workload; give "
                            "the script its own arguments after --")
    return str(script)


@app.command()
@error_boundary
def suite(
    out: Annotated[Path, typer.Option(help="folder for the run directories and the combined report")] = Path("runs"),
    preset: PresetOpt = "paper",
    workloads_: Annotated[str | None, typer.Option("--workloads", help="comma-separated subset "
                                                   "[default: the whole suite]")] = None,
    counters: Annotated[str, typer.Option(help="sampled, all or none")] = "sampled",
    steps: StepsOpt = 5,
    gpus: Annotated[int, typer.Option(help="profile one workload on each of this many identical GPUs of the "
                                      "host at once (0: all)")] = 1,
    history: HistoryOpt = None,
    commit: CommitOpt = None,
) -> None:
    """Profile every workload of the suite and write one combined report (suite-report.html)."""
    from ssmprof.pipeline import measure

    @contextlib.contextmanager
    def announced(workload: str):
        _say((workload, "bold"), f" --preset {preset}")
        with _progress() as report:
            yield report

    names = [name.strip() for name in workloads_.split(",")] if workloads_ else None
    result = measure.suite(out, preset, names, counters, steps, announced, gpus, history)
    _say(f"written: {_listed(result.report)}")
    _say(f"suite of {len(result.runs)} workloads in {result.wall_s:.0f} s (manifest: {result.manifest})")
    _append_history(result.runs, history, commit)


@app.command()
@error_boundary
def sweep(
    workloads_: Annotated[list[str], typer.Argument(metavar="WORKLOAD", help="one workload, or several: the "
                                                    "report then says where each overtakes the other per token")],
    vary: Annotated[list[str], typer.Option(help="a setting and its values, NAME=V1,V2,...; repeat it for a grid "
                                            "(e.g. --vary d_state=64,128 --vary chunk_size=128,256)")],
    out: Annotated[Path, typer.Option(help="the sweep's folder: a run directory per point and sweep.json")] = Path(
        "runs/sweep"),
    preset: PresetOpt = "paper",
    set_: SetOpt = None,
    counters: Annotated[str, typer.Option(help="focus (the SSM kernels and the 5 longest others, sampled), "
                                          "sampled, all or none")] = "focus",
    steps: StepsOpt = 5,
    warmup: WarmupOpt = None,
    resume: Annotated[bool, typer.Option(help="finish the sweep in --out: run only its points not complete")] = False,
    report_: Annotated[bool, typer.Option("--report/--no-report", help="write the regime map "
                                          "(sweep-report.html, sweep-csv/) at the end")] = True,
    shard: Annotated[str, typer.Option(help="I/N: run only shard I of N of the points (independent jobs, "
                                       "any host sharing --out); the last to end draws the map")] = "1/1",
    gpus: Annotated[int, typer.Option(help="run the points as shards on this many identical GPUs of the host "
                                      "at once (0: all)")] = 1,
) -> None:
    """Profile WORKLOAD(s) over a grid of settings, one run directory per point, and map the regimes: time per
    token by category, the SSM kernels' limiters, crossovers, the best chunk size. A failed point is recorded
    and the sweep goes on; `ssmprof report SWEEP_DIR` renders the map again."""
    from ssmprof.pipeline import sweep as sweeping

    @contextlib.contextmanager
    def announced(index: int, total: int, point):
        label = f"[{index}/{total}] {sweeping.point_label(point)}"
        _say(label)
        with _progress() as tell:
            yield tell
        wall = f" ({point.wall_s:.0f} s)" if point.wall_s is not None else ""
        _say(f"{label}: {point.status}{wall}")

    spec = sweeping.SweepSpec(workloads_, preset, vary, set_ or [], counters, steps, warmup)
    request = sweeping.SweepRequest(spec, out, resume, report_, sweeping.Shard.parse(shard), gpus)
    result = sweeping.sweep(request, announced)
    points = result.manifest.points
    _say(f"sweep of {len(points)} points in {result.manifest.wall_s:.0f} s: "
                  f"{sum(p.complete for p in points)} complete, {len(result.failed)} failed "
                  f"(manifest: {out / 'sweep.json'})")
    if result.report is not None:
        _say(f"written: {_listed(result.report)}")


@app.command()
@error_boundary
def calibrate(
    out: Annotated[Path | None, typer.Option(help="device profile to write [default: runs/device-profile.json, where "
                                                     "the reports of runs in runs/ find it]")] = None,
    ncu_timeout: Annotated[float, typer.Option(help="seconds the Nsight Compute child may take")] = 900,
    keep_report: Annotated[Path | None, typer.Option(help="copy the calibration .ncu-rep here")] = None,
) -> None:
    """Check the counter formulas on kernels of known work and measure this GPU's ceilings."""
    from ssmprof.pipeline import measure

    with console.status("calibrating (ceilings, then Nsight Compute on known kernels)"):
        result = measure.calibrate(out, ncu_timeout, keep_report)
    table = Table(title=f"calibration on {result.profile.gpu.name}")
    for column in ("check", "kernel", "expected", "measured", "error %", "result"):
        table.add_column(column)
    for row in result.checks.itertuples():
        table.add_row(row.check, row.kernel, f"{row.expected:.4g}", f"{row.measured:.4g}", f"{row.error_pct:.3f}",
                      _styled("pass", "green") if row.passed else _styled("FAIL", "red"))
    console.print(table)
    datasheet = result.profile.datasheet
    for key, value in result.profile.measured.model_dump(exclude={"source"}, exclude_none=True).items():
        share = f" ({value / datasheet[key]:.0%} of datasheet)" if key in datasheet else ""
        _say(f"{key}: {value:,.1f}{share}, set by {result.profile.set_by.get(key, 'CUDA events')}")
    if result.profile.note:
        _say(f"note: {result.profile.note}")
    _say(f"device profile: {result.path}")
    if result.failed:
        raise SsmprofError(f"calibration checks failed: {', '.join(result.failed)}")


@app.command()
@error_boundary
def report(
    runs: Annotated[list[Path], typer.Argument(metavar="RUN_DIR", help="run directories written by `ssmprof "
                                                "profile`, or sweep folders written by `ssmprof sweep` (their "
                                                "regime map)")],
    output: Annotated[Path | None, typer.Option("-o", "--output", help="file to write [default: report.html; "
                                                "with --format md, markdown printed]")] = None,
    format_: Annotated[str | None, typer.Option("--format", help="html or md [default: the output file's suffix, "
                                                "else html]")] = None,
    csv: Annotated[Path | None, typer.Option(help="also write every table as CSV into this folder")] = None,
    device_profile: Annotated[Path | None, typer.Option(help="ceilings measured by `ssmprof calibrate` on the "
                                                        "runs' GPU [default: device-profile.json in or beside "
                                                        "each run, else the bundled one of its GPU model, else "
                                                        "the datasheet]")] = None,
    trace: Annotated[Path | None, typer.Option(help="also write the profiled iteration(s) as a Perfetto / Chrome "
                                                    "trace (JSON) here, to open in ui.perfetto.dev")] = None,
) -> None:
    """Analyze run directories and write the report (HTML with charts, or markdown); several runs get a
    suite overview first (category shares per workload, the SSM kernels of all of them)."""
    from ssmprof.pipeline import reporting

    format_, output = reporting.output_target(format_, output, "html", "report.html")
    text = reporting.report(runs, format_, output, csv, device_profile, trace)
    _emit(text, output)
    if trace is not None:
        _say(f"trace written: {trace} (open in https://ui.perfetto.dev)")


@app.command()
@error_boundary
def reference(
    out: Annotated[Path, typer.Option(help="folder for the reports")] = Path("runs/reference"),
) -> None:
    """Render the reference runs bundled with ssmprof (the paper suite on an H100 and an H200): one suite
    report per GPU, an H100-vs-H200 comparison per workload, the regime map of each bundled sweep, and a
    Perfetto trace per GPU (open the trace-*.json files in ui.perfetto.dev). Needs no GPU."""
    from ssmprof import bundled
    from ssmprof.pipeline import reporting
    from ssmprof.pipeline.outputs import with_library

    written = reporting.reference(out)
    first, second = bundled.GPUS.values()
    _say(f"These are BUNDLED measurements (paper suite on an {first} and an {second}, shipped in "
         f"{bundled.REFERENCE}), not measurements of this machine.")
    _say("To profile your own GPU: make profile (it installs and builds the kernels first), or: ssmprof suite "
         "--preset paper.")
    files = with_library(written)
    _say(f"Open first: {written[0]} (the {first} suite: findings, kernel time by category, the SSM kernels on "
         f"their roofline). Written beside it: {len(files) - 1} more files in {out} (ssmprof's README says what "
         "each shows).")


@app.command()
@error_boundary
def results(
    readme: Annotated[Path | None, typer.Option(help="replace the Results section of this file in place "
                                                "(docs/results.md) [default: print it]")] = None,
) -> None:
    """The Results section of docs/results.md, generated from the bundled reference runs."""
    from ssmprof.pipeline import reporting

    text = reporting.results(readme)
    if readme is None:
        sys.stdout.write(text)
    else:
        _say(f"results written into {readme}")


@app.command()
@error_boundary
def compare(
    run_a: Annotated[Path, typer.Argument(metavar="RUN_A", help="run directory A")],
    run_b: Annotated[Path, typer.Argument(metavar="RUN_B", help="run directory B")],
    output: Annotated[Path | None, typer.Option("-o", "--output", help="file to write [default: markdown printed; "
                                                "with --format html, compare.html]")] = None,
    format_: Annotated[str | None, typer.Option("--format", help="html or md [default: the output file's suffix, "
                                                "else md]")] = None,
) -> None:
    """Compare two runs of one workload, such as H100 vs H200: categories and kernels matched by launch config."""
    from ssmprof.pipeline import reporting

    format_, output = reporting.output_target(format_, output, "md", "compare.html")
    _emit(reporting.compare(run_a, run_b, format_, output), output)


@app.command()
@error_boundary
def baseline(
    runs: Annotated[list[Path], typer.Argument(metavar="RUN_DIR", help="repeated runs of one configuration")],
    output: Annotated[Path, typer.Option("-o", "--output", help="baseline file to write")] = Path("baseline.json"),
) -> None:
    """Build a baseline from repeated runs: totals, phases, categories, kernels and their noise."""
    from ssmprof.pipeline import gate

    result = gate.baseline(runs, output)
    _say(f"baseline of {result.runs} run{'s' * (result.runs != 1)}, {result.rows} measurements: {result.path}")


@app.command()
@error_boundary
def regress(
    runs: Annotated[list[Path], typer.Argument(metavar="RUN_DIR", help="run directories to check")],
    baseline_file: Annotated[Path | None, typer.Option(
        "--baseline", help="from `ssmprof baseline`; without it, the last --last runs of the run's configuration "
        "in --history")] = None,
    junit: Annotated[Path | None, typer.Option(help="also write a JUnit XML summary here")] = None,
    summary: Annotated[Path | None, typer.Option(help="also write the markdown summary here")] = None,
    allow_different_gpu: Annotated[bool, typer.Option(
        "--allow-different-gpu", help="gate runs of another GPU than the baseline's (the summary says so)")] = False,
    allow_different_config: Annotated[bool, typer.Option(
        "--allow-different-config", help="gate runs of another workload config than the baseline's (the summary "
        "says so)")] = False,
    min_effect: Annotated[float | None, typer.Option(help="per kernel: smallest relative change that counts "
                                                     "[default: 0.05]")] = None,
    aggregate_effect: Annotated[float | None, typer.Option(help="total, phases, categories: smallest relative "
                                                           "change that counts [default: 0.005]")] = None,
    sigmas: Annotated[float | None, typer.Option(help="noise band, in baseline standard deviations "
                                                 "[default: 3]")] = None,
    min_time_ns: Annotated[float | None, typer.Option(help="smallest change of time per launch that counts, ns "
                                                      "[default: 250]")] = None,
    min_impact: Annotated[float | None, typer.Option(help="smallest share of the run's kernel time a change must "
                                                     "cost [default: 0.0002]")] = None,
    history: HistoryOpt = None,
    last: Annotated[int, typer.Option(help="runs in the rolling baseline drawn from --history")] = 10,
    bootstrap: Annotated[int, typer.Option(help="with --history: runs of the configuration it must hold before a "
                                           "run is gated; until then a run passes, \"no baseline yet\", and is "
                                           "appended")] = 3,
    append: Annotated[bool, typer.Option(help="append the gated runs to --history after gating")] = True,
    metrics: Annotated[Path | None, typer.Option(help="also write the runs' metrics in Bencher Metric Format "
                                                 "(JSON) here")] = None,
    commit: CommitOpt = None,
) -> None:
    """Exit 1 if the run got slower or less efficient than the baseline allows (markdown on stdout)."""
    from ssmprof.pipeline import gate

    thresholds = gate.thresholds(min_effect=min_effect, aggregate_effect=aggregate_effect, sigmas=sigmas,
                                 min_time_ns=min_time_ns, min_impact=min_impact)
    result = gate.regress(runs, baseline_file, junit, summary, thresholds, allow_different_gpu,
                          allow_different_config, history, last, metrics, bootstrap)
    sys.stdout.write(result.summary)
    if append:
        _append_history(runs, history, commit)
    if result.regressed:
        raise typer.Exit(1)


def _append_history(runs: list[Path], history: Path | None, commit: str | None) -> None:
    from ssmprof.pipeline import history as store

    if history is not None:
        appended = store.append(runs, history, commit)
        _say(f"appended {len(appended.written)} run(s) to history {history}")
        for path in appended.present:
            _say(f"{path} is in history {history} already: not appended again")


@app.command(name="history")
@error_boundary
def history_(
    folder: Annotated[Path, typer.Argument(metavar="HISTORY_DIR", help="the history folder (one parquet file per "
                                           "appended run)")],
    out: Annotated[Path | None, typer.Option(help="write history.html and history.md into this folder (without "
                                             "it, nothing is written: the runs and change points are only "
                                             "printed)")] = None,
    add: Annotated[list[Path] | None, typer.Option(help="run directories to append first (repeat it)")] = None,
    commit: CommitOpt = None,
) -> None:
    """Trends of step time, kernel time and efficiency over the history's runs, with change points. Prints per
    configuration its runs and change points, then one line per change point and series: its first changed run,
    the run before, the change and the noise band it lies beyond."""
    from ssmprof.pipeline import history as store

    if add:
        _append_history(add, folder, commit)
    result = store.history_report(folder, out)
    for trend, lines in zip(result.trends, result.change_lines, strict=True):
        runs, changes = len(trend.runs), trend.change_count
        _say(f"{trend.workload} ({trend.preset}, {trend.gpu}): {runs} run{'s' * (runs != 1)}, "
             f"{changes} change point{'s' * (changes != 1)}")
        for line in lines:
            _say(line)
    if result.html is not None and result.markdown is not None:  # written where --out was given
        _say(f"written: {_listed(result.html, result.markdown)}")


@app.command()
@error_boundary
def project(
    run: Annotated[Path, typer.Argument(metavar="RUN_DIR", help="a measured run directory")],
    to: Annotated[str, typer.Option(help="target GPU: a key of the datasheet table (h100-sxm, h200, a100-80gb, ...)")],
    check: Annotated[Path | None, typer.Option(help="a run of the same workload measured on the target: "
                                               "report the projection's error per category")] = None,
) -> None:
    """Project a run's per-kernel and per-category time onto another GPU (a projection, labelled as such)."""
    from ssmprof.pipeline import reporting

    sys.stdout.write(reporting.project(run, to, check))


def _listed(*paths: Path) -> str:
    """The files written, as one line: each page with the plotly.js beside it that it loads."""
    from ssmprof.pipeline.outputs import with_library

    return ", ".join(map(str, with_library(list(paths))))


def _emit(text: str, output: Path | None) -> None:
    """Print what a command rendered, or where the pipeline wrote it."""
    if output is None:
        sys.stdout.write(text)
    else:
        _say(f"written: {_listed(output)}")


@contextlib.contextmanager
def _progress():
    """A rich progress bar on a terminal; elsewhere (a CI log, a batch job) one line when a stage starts and one
    when it ends, with the seconds since the command began, so that a long profile shows where it spends.
    Yields the `report(stage, done, total)` callback."""
    terminal = sys.stderr.isatty()
    bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                   console=err_console, transient=True, disable=not terminal)
    tasks: dict[str, TaskID] = {}
    logged: dict[str, str] = {}  # off a terminal: the last line printed for each stage
    began = time.perf_counter()

    def report(stage: str, done: int, total: int) -> None:
        state = "done" if done >= total else "started"
        if not terminal and logged.get(stage) != state:
            logged[stage] = state
            _say(f"[{time.perf_counter() - began:7.1f} s] {stage}: {state} ({done}/{total})", err=True)
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
    if result.graphed_step_ms is not None:
        graphed = result.graphed_step_times_ms
        table.add_row("step time, CUDA graph", f"{result.graphed_step_ms:.2f} ms  (min {min(graphed):.2f}, max "
                      f"{max(graphed):.2f}; {result.step_ms - result.graphed_step_ms:.2f} ms under the eager step)")
    peak = result.peak_memory_bytes
    table.add_row("peak memory", f"{peak / 2**30:.2f} GiB" if peak is not None else "n/a (CPU)")
    table.add_row("final loss", f"{result.final_loss:.4f}")
    for op, impl in result.provenance.items():
        table.add_row(f"kernel: {op}", impl)
    console.print(table)


if __name__ == "__main__":
    app()
