"""ssmprof: characterize how Mamba-based state space models train on NVIDIA GPUs."""

__version__ = "0.1.0"
