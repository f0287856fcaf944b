"""A two-node profile without a cluster: two torchrun agents on this machine (`--nnodes 2`, node ranks 0 and 1,
one c10d rendezvous at 127.0.0.1), each started by its own `ssmprof profile` as Slurm would start one per node,
over gloo on the CPU. Node 0 writes one merged run; the collectives per layer are those of one node's run."""

import os
import socket
import subprocess
import sys
import time

import pytest

from ssmprof.analysis.step.communication import collective_counts
from ssmprof.schema import read_run

pytestmark = pytest.mark.multinode


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def node_command(out, node_rank: int, endpoint: str) -> list[str]:
    return [sys.executable, "-m", "ssmprof.cli", "profile", "mamba2-lm", "--preset", "tiny", "--tp", "2",
            "--device", "cpu", "--counters", "none", "--steps", "1", "--warmup", "0", "--out", str(out),
            "--nnodes", "2", "--node-rank", str(node_rank), "--rdzv-endpoint", endpoint, "--job-id", "ci-2nodes"]


def test_two_torchrun_agents_as_two_nodes_merge_into_one_run(tmp_path):
    endpoint = f"127.0.0.1:{free_port()}"
    env = {**os.environ, "COLUMNS": "200"}
    began = time.perf_counter()
    nodes = [subprocess.Popen(node_command(tmp_path, rank, endpoint), stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, env=env) for rank in (1, 0)]
    outputs = [node.communicate(timeout=600)[0] for node in nodes]
    took = time.perf_counter() - began
    assert [node.returncode for node in nodes] == [0, 0], outputs
    assert "node 1: its ranks are done; node 0 writes the run directory" in outputs[0]
    runs = [path for path in tmp_path.iterdir() if path.name.startswith("mamba2-lm-tiny-tp2-")]
    assert len(runs) == 1 and f"run directory: {runs[0]}" in outputs[1].replace("\n", "")
    run = read_run(runs[0])
    parallel = run.info.parallel.model_dump()
    assert (parallel["world_size"], parallel["nnodes"], parallel["backend"]) == (2, 2, "gloo")
    assert sorted(r["node_rank"] for r in parallel["ranks"]) == [0, 1]  # one rank on each node
    assert sorted(run.kernels["rank"].unique()) == [0, 1]
    assert parallel["ranks"][0]["final_loss"] == parallel["ranks"][1]["final_loss"]
    counts = collective_counts(run.kernels, parallel["sequence_parallel"])
    assert counts["matches"].all(), counts
    assert not list(tmp_path.glob(".ranks-*")) and not list(tmp_path.glob(".*partial*"))  # node 0 cleaned up
    print(f"two-node CPU profile: {took:.1f} s")
