"""Reference runs inside the package: the paper-preset suite profiled on an H100 and an H200, and the paper presets of
the newer workloads where they were measured: mamba3-lm, gdn-lm and gdn-hybrid on the H200, mamba3-lm on the H100 at
batch 1 (at the paper's batch 2 its 49 GiB of live tensors make Nsight Compute's kernel replay save them through the
host; its per-layer kernels are the same).

Each was written by `ssmprof suite --preset paper` (sampled counters) through `scripts/gpu_check.sh suite`; only
run.json + kernels.parquet are kept, with each GPU's `ssmprof calibrate` device profile. Runs of schema 2 (run.json
has `checks`) carry the exact counter join and checked counters; the others (schema 1) were joined by short name, grid
and block size and load as `unchecked`; `ssmprof results`' Runs table says which is which. `make profile` on a machine
without a GPU renders them (`ssmprof reference`), and `ssmprof results` writes the README's Results section from them.
Sweeps (`ssmprof sweep`, through `scripts/gpu_check.sh sweep-seq` and `sweep-chunk`) live beside them in
`<gpu>/sweeps/<name>/`; their regime maps' headlines join the Results. The tensor-parallel runs (`scripts/gpu_check.sh
tp` and `tp-claim` on 2 H200s; `ssmprof profile --tp 4` on a 4 x H100 host, counters on rank 0) live in
`<gpu>/parallel/<scenario>/` with the single-GPU runs of the same host: `ssmprof reference` gives them a suite page of
their own and the Results a table. The SSM kernels' memory use under the study's definitions (`scripts/study_dram.py`)
is `<gpu>/study-ssm-memory.csv`, a table of the Results. Models people ship (`hf:` workloads, `ssmprof profile
hf:<arch> --preset small`) live in `<gpu>/models/<name>/`, each with the device profile of the host that ran it (as
mamba3-lm on the H100), and get a page of their own. Those profiles are their hosts' records: every bundled run stands
on its GPU's one bundled profile (`hardware.profile_folders`), so each GPU's pages state one set of ceilings.
"""

from __future__ import annotations

from pathlib import Path

from ssmprof.hardware import REFERENCE, bundled_profile

SWEEPS = "sweeps"  # REFERENCE/<gpu>/sweeps/<name>/: sweep.json and its points' run.json + kernels.parquet
MODELS = "models"  # REFERENCE/<gpu>/models/<name>/: models people ship (`hf:` workloads), each with its host's profile
PARALLEL = "parallel"  # REFERENCE/<gpu>/parallel/<scenario>/: multi-GPU runs and the same host's single-GPU runs
# REFERENCE/<gpu>/: the SSM kernels' memory use under the study's definitions and cache settings (scripts/study_dram.py)
STUDY_MEMORY = "study-ssm-memory.csv"
GPUS = {"h100-sxm": "H100", "h200": "H200"}  # folder (a key of the datasheet table) -> short label


def runs(gpu: str) -> list[Path]:
    """The run directories measured on `gpu`: the paper suite's in suite order, then the newer workloads' (Mamba-3,
    Gated DeltaNet) where they were measured there."""
    from ssmprof.workloads.registry import WORKLOADS  # imports torch, which reports need not load

    return [REFERENCE / gpu / name for name in WORKLOADS if (REFERENCE / gpu / name / "run.json").exists()]


def paper_suite() -> list[str]:
    """The paper suite's workload names, in suite order."""
    from ssmprof.workloads.registry import SUITE

    return [w.name for w in SUITE]


def sweeps(gpu: str) -> list[Path]:
    """The sweep folders (`ssmprof sweep`, bundled by `scripts/bundle_sweep.sh`) measured on `gpu`, by name."""
    return sorted(path.parent for path in (REFERENCE / gpu / SWEEPS).glob("*/sweep.json"))


def parallel_runs(gpu: str) -> list[Path]:
    """The multi-GPU runs measured on `gpu` (`ssmprof profile --tp`, through `scripts/gpu_check.sh tp` and
    `tp-claim`), beside the single-GPU runs of the same host that their speedups are measured against, by name."""
    return sorted(path.parent for path in (REFERENCE / gpu / PARALLEL).glob("*/run.json"))


def shipped_models(gpu: str) -> list[Path]:
    """The run directories of models people ship (`hf:` workloads from their published configurations, profiled
    with `ssmprof profile hf:<arch>`) measured on `gpu`, by name."""
    return sorted(path.parent for path in (REFERENCE / gpu / MODELS).glob("*/run.json"))


def study_memory(gpu: str) -> Path | None:
    """The SSM kernels' memory use measured on `gpu` under the study's definitions (`scripts/study_dram.py`, the
    paper mamba2-lm's SSM launch configurations with the caches flushed and kept); None where not measured there."""
    path = REFERENCE / gpu / STUDY_MEMORY
    return path if path.exists() else None


def device_profile(gpu: str) -> Path:
    """The bundled device profile of `gpu` (`hardware.bundled_profile`): what runs of that GPU model stand on."""
    return bundled_profile(gpu)
