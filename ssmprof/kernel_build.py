"""`make kernels`: build the causal-conv1d and selective-scan CUDA extensions for this GPU only.

Upstream setup.py files compile every architecture they support; one architecture takes a fraction of
that time (both extensions build in parallel). The sources come from the pinned sdists (in
$WHEELHOUSE or ./wheelhouse, else downloaded). Each build lands in build/kernels/<torch>-<arch>/, a
`.pth` file puts those folders on this environment's import path, and a finished build is reused.

The sources are compiled here, whatever the sdist's setup.py would do: newer mamba-ssm releases build the
selective-scan extension only on request (MAMBA_KEEP_CUDA_BUILD=TRUE), which does not matter to this build as
long as the sdist still ships `csrc/selective_scan` (checked, with a clear error, if the pin moves).
Nothing is built ahead for Mamba-3 or Gated DeltaNet: their Triton kernels (Mamba-3 SISO, fla) compile at first
call into TRITON_CACHE_DIR, and Mamba-3 MIMO's TileLang kernels with the host's nvcc into TILELANG_CACHE_DIR.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import tarfile
import time
from pathlib import Path

SDISTS = {"causal_conv1d_cuda": "causal_conv1d-1.7.0", "selective_scan_cuda": "mamba_ssm-2.3.2.post1"}
SOURCES = {
    "causal_conv1d_cuda": ["csrc/causal_conv1d.cpp", "csrc/causal_conv1d_fwd.cu", "csrc/causal_conv1d_bwd.cu",
                           "csrc/causal_conv1d_update.cu"],
    "selective_scan_cuda": ["csrc/selective_scan/selective_scan.cpp"] + [
        f"csrc/selective_scan/selective_scan_{kind}.cu"
        for kind in ("fwd_fp32", "fwd_fp16", "fwd_bf16", "bwd_fp32_real", "bwd_fp32_complex", "bwd_fp16_real",
                     "bwd_fp16_complex", "bwd_bf16_real", "bwd_bf16_complex")
    ],
}
# The upstream nvcc flags, less the architecture list and -lineinfo (source-line tables serve ncu's source
# view, which we do not use, and make the libraries larger; the build is carried between GPU hosts).
NVCC_FLAGS = ["-O3", "-std=c++17", "-U__CUDA_NO_HALF_OPERATORS__", "-U__CUDA_NO_HALF_CONVERSIONS__",
              "-U__CUDA_NO_BFLOAT16_OPERATORS__", "-U__CUDA_NO_BFLOAT16_CONVERSIONS__",
              "-U__CUDA_NO_BFLOAT162_OPERATORS__", "-U__CUDA_NO_BFLOAT162_CONVERSIONS__",
              "--expt-relaxed-constexpr", "--expt-extended-lambda", "--use_fast_math", "--threads", "4"]
ROOT = Path.cwd() / "build" / "kernels"


def _sdist(stem: str) -> Path:
    for folder in filter(None, (os.environ.get("WHEELHOUSE"), "wheelhouse", str(ROOT / "sdist"))):
        candidate = Path(folder) / f"{stem}.tar.gz"
        if candidate.exists():
            return candidate
    name, version = stem.rsplit("-", 1)
    env = {**os.environ, "MAMBA_FORCE_BUILD": "TRUE", "MAMBA_SKIP_CUDA_BUILD": "TRUE",
           "CAUSAL_CONV1D_FORCE_BUILD": "TRUE", "CAUSAL_CONV1D_SKIP_CUDA_BUILD": "TRUE"}
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:",
                    "--no-build-isolation", "-d", str(ROOT / "sdist"), f"{name.replace('_', '-')}=={version}"],
                   check=True, env=env)
    return ROOT / "sdist" / f"{stem}.tar.gz"


def _unpack(stem: str) -> Path:
    target = ROOT / "src"
    if not (target / stem).exists():
        target.mkdir(parents=True, exist_ok=True)
        with tarfile.open(_sdist(stem)) as archive:
            archive.extractall(target, filter="data")
    return target / stem


def _build_one(name: str, build_dir: Path) -> None:
    """Runs in a child process (one per extension, so the two builds overlap)."""
    from torch.utils.cpp_extension import load

    src = _unpack(SDISTS[name])
    missing = [source for source in SOURCES[name] if not (src / source).exists()]
    if missing:
        raise SystemExit(f"{SDISTS[name]} lacks the sources of {name} ({', '.join(missing)}): the pinned release "
                         "no longer ships them; pin a release that does")
    load(name=name, sources=[str(src / s) for s in SOURCES[name]], extra_cflags=["-O3", "-std=c++17"],
         extra_cuda_cflags=NVCC_FLAGS, extra_include_paths=[str(src / Path(SOURCES[name][0]).parent)],
         build_directory=str(build_dir), verbose=False)


def main() -> int:
    import torch

    if not torch.cuda.is_available():
        print("make kernels: no CUDA GPU visible; the extensions are built for the local GPU only", file=sys.stderr)
        return 1
    major, minor = torch.cuda.get_device_capability()
    tag = f"torch{torch.__version__.replace('+', '-')}-sm{major}{minor}"
    os.environ["TORCH_CUDA_ARCH_LIST"] = f"{major}.{minor}"  # torch adds exactly this -gencode
    started = time.perf_counter()
    children = {}
    for name in SDISTS:
        build_dir = ROOT / tag / name
        if (build_dir / f"{name}.so").exists():
            print(f"{name}: already built in {build_dir}")
            continue
        build_dir.mkdir(parents=True, exist_ok=True)
        _unpack(SDISTS[name])  # unpack here, once, before two children could race on it
        log = open(build_dir / "build.log", "w")  # noqa: SIM115 - closed after the child exits
        code = f"from pathlib import Path; from ssmprof.kernel_build import _build_one; " \
               f"_build_one({name!r}, Path({str(build_dir)!r}))"
        children[name] = (subprocess.Popen([sys.executable, "-c", code], stdout=log, stderr=subprocess.STDOUT), log)
    failed = []
    for name, (child, log) in children.items():
        child.wait()
        log.close()
        if child.returncode != 0:
            failed.append(name)
            print(f"{name}: build FAILED, see {ROOT / tag / name / 'build.log'}", file=sys.stderr)
    if failed:
        return 1
    pth = Path(sysconfig.get_paths()["purelib"]) / "ssmprof_kernels.pth"
    pth.write_text("".join(f"{ROOT / tag / name}\n" for name in SDISTS))
    print(f"kernels ready for sm_{major}{minor} in {time.perf_counter() - started:.0f} s "
          f"(import path added by {pth})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
