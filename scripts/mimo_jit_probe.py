"""Why Mamba-3 MIMO trains at seconds a step: what each call of mamba-ssm's TileLang MIMO kernels costs the host.

mamba-ssm 2.3.2.post1 calls each MIMO kernel factory (`@tilelang.jit`) with fresh `T.dynamic("B")`-style size
variables on every forward and backward. TileLang 0.1.8 keys its per-function kernel cache on the arguments, and a
TVM variable hashes by object identity, so every call misses that cache and builds the kernel's TIR program again
(then hashes its printed script for TileLang's global cache, which returns the compiled kernel: no nvcc). This probe
measures those steps on the CPU, for the three kernels one MIMO layer calls per training step, at `mamba3-lm
--preset small --set mimo=true`'s static sizes. No GPU: the factories build TIR only.

    PYTHONPATH=<tilelang 0.1.8 + apache-tvm-ffi + torch, Python 3.12> python scripts/mimo_jit_probe.py MAMBA3_DIR

MAMBA3_DIR: mamba_ssm/ops/tilelang/mamba3 of the pinned mamba-ssm. The backward module's Triton helpers and
benchmark import are stubbed: the kernel factories do not use them.
"""

import importlib.util
import sys
import time
import types
from pathlib import Path
from typing import Any

# mamba3-lm small with mimo=true: d_state 128, headdim 64, rank 4, chunk 64 / 4, rope fraction 0.5, bf16; z and D on
SIZES = dict(N=128, P=64, R=4, hasZ=True, hasD=True, reduceO=True)
KERNELS = {  # file, factory, its keyword arguments as mamba-ssm passes them
    "forward": ("mamba3_mimo_fwd.py", "mamba_mimo_fwd",
                dict(return_final_state=False, chunk_size=16, rotary_dim_divisor=4, dtype="bfloat16", threads=128,
                     num_stages=0)),
    "backward (recompute)": ("mamba3_mimo_bwd.py", "mamba_mimo_bwd_fwd",
                             dict(chunk_size=16, rotary_dim_divisor=4, dtype="bfloat16", threads=128, num_stages=0)),
    "backward": ("mamba3_mimo_bwd.py", "mamba_mimo_bwd_bwd",
                 dict(chunk_size=16, rotary_dim_divisor=4, dtype="bfloat16", threads=256, num_stages=0)),
}


def load(path: Path) -> types.ModuleType:
    stubs: dict[str, Any] = {"triton": types.ModuleType("triton"), "triton.testing": types.ModuleType("triton.testing"),
             "mamba_ssm.ops.triton.mamba3.mamba3_mimo_utils": types.ModuleType("mamba3_mimo_utils")}
    stubs["triton.testing"].do_bench = None
    stubs["mamba_ssm.ops.triton.mamba3.mamba3_mimo_utils"].bwd_dadt_fused_triton = None
    stubs["mamba_ssm.ops.triton.mamba3.mamba3_mimo_utils"].bwd_dtrap_ddt_triton = None
    for name, module in stubs.items():
        sys.modules.setdefault(name, module)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"{path} is not a Python module")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main(folder: Path) -> None:
    from tilelang import language as T  # imported here: the module imports where TileLang is not installed

    for label, (file, factory, options) in KERNELS.items():
        jit = getattr(load(folder / file), factory)
        jit.func.set_mode("lazy")
        for call in range(3):
            started = time.perf_counter()
            sizes = (T.dynamic("B"), T.dynamic("S"), T.dynamic("H"), T.dynamic("G"))  # new each call, as mamba-ssm
            key, _ = jit.func.parse_args(*sizes, **SIZES, **options)
            hit = key in jit._kernel_cache
            program = jit.func.orig_func(*sizes, **SIZES, **options)  # what a cache miss compiles first
            built = time.perf_counter()
            script = program.script(show_meta=True)  # what the global cache hashes into its key
            printed = time.perf_counter()
            print(f"{label} ({factory}) call {call}: kernel cache hit {hit}; TIR program built in "
                  f"{built - started:.2f} s, printed in {printed - built:.2f} s ({len(script) / 1e3:.0f} kB)")
    same = (T.dynamic("B"), T.dynamic("B"))
    print(f"two T.dynamic('B') hash alike: {hash(same[0]) == hash(same[1])}")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
