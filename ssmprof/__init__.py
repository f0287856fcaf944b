"""ssmprof: characterize how Mamba-based state space models train on NVIDIA GPUs.

`ssmprof.step()` and `ssmprof.phase()` mark a training script of one's own for `ssmprof profile --script`
(`ssmprof.api`); they import no torch and do nothing outside a profile. `ssmprof.load(path)` reads a run directory
for a notebook (`pipeline.loading.load`, docs/notebook.md): its typed run.json, its kernels and its analyzed summary.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ssmprof.api import phase, step

if TYPE_CHECKING:
    from pathlib import Path

    from ssmprof.pipeline.loading import LoadedRun

__all__ = ["load", "phase", "step"]
__version__ = "0.1.0"


def load(path: str | Path, device_profile: str | Path | None = None) -> LoadedRun:
    """A run directory, analyzed as `ssmprof report` analyzes it: `.info`, `.kernels`, `.summary`, `.warnings`
    (`pipeline.loading.LoadedRun`). Imported on first call, so that `import ssmprof` in a training script stays
    free of pandas and the analyses."""
    from ssmprof.pipeline.loading import load as load_run_directory

    return load_run_directory(path, device_profile)
