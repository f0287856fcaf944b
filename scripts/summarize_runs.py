"""Print one table of every `ssmprof run --json` result in a folder (the last thing gpu-check prints)."""

import json
import sys
from pathlib import Path


def summarize(folder: Path) -> None:
    """One line per `run-*.json` harness result in `folder`: step time, throughput, peak memory, kernels."""
    print(f"{'run':<34}{'step ms':>10}{'throughput':>16}{'peak GiB':>10}  kernels")
    for path in sorted(folder.glob("run-*.json")):
        data = json.loads(path.read_text())
        if "step_ms" not in data:
            continue
        kernels = ", ".join(f"{op}={impl.split(' ')[0]}" for op, impl in data["provenance"].items())
        peak = data["peak_memory_bytes"] / 2**30 if data["peak_memory_bytes"] else float("nan")
        print(f"{path.stem:<34}{data['step_ms']:>10.2f}{data['throughput']:>12,.0f} {data['unit'][:3]}/s"
              f"{peak:>10.2f}  {kernels}")


if __name__ == "__main__":
    summarize(Path(sys.argv[1]))
