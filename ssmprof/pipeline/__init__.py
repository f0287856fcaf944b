"""What each command does, as functions of paths and options that return results; `cli.py` only parses
options, calls one of these, and prints. Nothing here prints or knows about typer.

- `measure`: prepare a workload, train (`run`), profile, suite, calibrate (needs torch; GPU for most)
- `sweep`: a grid of settings profiled point by point, the sweep manifest (needs torch and a GPU)
- `regimes`: the regime map of sweep folders (CPU only)
- `loading`: runs as the analyses take them, read, categorized and derived once (ceilings: `hardware.run_ceilings`)
- `reporting`: report, reference, results, compare, project (CPU only, from run directories)
- `history`: the run history's trends, change points and rolling baselines; `outputs`: output paths checked first
- `gate`: baseline and regress
- `doctor`: the environment a run here would record, and which fused kernels can run
"""
