"""The work an op's recorded input shapes say it does (torch.profiler's `launch_shapes`): a GEMM's M, N, K, or the
elements its inputs broadcast to. Read by the counter self-checks (2MNK against measured tensor work) and by the
counter join (a problem lent another problem's counters, scaled by their work)."""

from __future__ import annotations

import json
import math

import numpy as np

# Ops whose input shapes give a GEMM's work, and where M, K, N stand in the shapes ([batch,] rows, inner).
_GEMM_OPS = {"aten::mm": (0, 1), "aten::addmm": (1, 2), "aten::bmm": (0, 1), "aten::baddbmm": (1, 2),
             "aten::addbmm": (1, 2)}


def gemm_problem(launch_op: str, launch_shapes: str) -> tuple[float, int, int, int] | None:
    """(batch, M, N, K) of a GEMM op from its recorded input shapes; None where the op or shapes say nothing."""
    where = _GEMM_OPS.get(launch_op)
    if where is None or not launch_shapes:
        return None
    try:
        shapes = json.loads(launch_shapes)
        a, b = shapes[where[0]], shapes[where[1]]
    except (ValueError, IndexError, TypeError):
        return None
    if len(a) < 2 or len(b) < 2 or a[-1] != b[-2]:
        return None
    batch = float(np.prod(a[:-2])) if len(a) > 2 else 1.0
    return batch, a[-2], b[-1], a[-1]


def gemm_flops(launch_op: str, launch_shapes: str) -> float:
    """2*M*N*K (x batch) of a GEMM op from its recorded input shapes; NaN where the op or shapes say nothing."""
    problem = gemm_problem(launch_op, launch_shapes)
    if problem is None:
        return float("nan")
    batch, m, n, k = problem
    return 2.0 * batch * m * n * k


def problem_work(launch_op: str, launch_shapes: str) -> float:
    """A measure proportional to an op's work where its recorded shapes give one: 2MNK (x batch) for a GEMM, else the
    elements of the shape its inputs broadcast to (an elementwise kernel touches each output element once: graph-mamba's
    add of [128, 1] and [128, 223] does 128 x 223, where its largest input said 223 and lent its counters x128).
    NaN where the shapes say nothing or do not broadcast: a convolution, an index_put or a sort, whose kernels (cuDNN's
    layout transforms, CUB's radix sort) do work their inputs' sizes do not give."""
    flops = gemm_flops(launch_op, launch_shapes)
    if not math.isnan(flops):
        return flops
    try:
        shapes = json.loads(launch_shapes) if launch_shapes else []
        tensors = [tuple(shape) for shape in shapes if isinstance(shape, list) and shape
                   and all(isinstance(n, int) for n in shape)]
        return float(np.prod(np.broadcast_shapes(*tensors))) if tensors else float("nan")
    except ValueError:  # unreadable shapes, or shapes that do not broadcast
        return float("nan")
