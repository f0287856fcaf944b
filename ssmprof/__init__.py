"""ssmprof: characterize how Mamba-based state space models train on NVIDIA GPUs.

`ssmprof.step()` and `ssmprof.phase()` mark a training script of one's own for `ssmprof profile --script`
(`ssmprof.api`); they import no torch and do nothing outside a profile."""

from ssmprof.api import phase, step

__all__ = ["phase", "step"]
__version__ = "0.1.0"
