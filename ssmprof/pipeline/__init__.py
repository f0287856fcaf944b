"""What each command does, as functions of paths and options that return results; `cli.py` only parses
options, calls one of these, and prints. Nothing here prints or knows about typer.

- `measure`: prepare a workload, train (`run`), profile, suite, calibrate (needs torch; GPU for most)
- `sweep`: a grid of settings profiled point by point, the sweep manifest (needs torch and a GPU)
- `regimes`: the regime map of sweep folders (CPU only)
- `ceilings`: which roofline ceilings a run gets (measured on its GPU, else the datasheet), decided once
- `reporting`: report, reference, results, compare, project (CPU only, from run directories)
- `gate`: baseline and regress
- `doctor`: the environment a run here would record, and which fused kernels can run
"""
