"""A training loop of one's own, as `ssmprof profile --script` takes it: ssmprof's mamba2-lm (the model, batch
and loss `ssmprof profile mamba2-lm` trains) under a plain loop. The lines marked `# ssmprof` are all that
profiling adds; without `ssmprof profile` they do nothing.

    ssmprof profile --script examples/train_script.py -- --steps 40
    python examples/train_script.py --steps 40        # the same loop, unprofiled
"""

import argparse

import torch

import ssmprof  # ssmprof
from ssmprof.kernels import plan_kernels
from ssmprof.workloads.registry import get_workload

parser = argparse.ArgumentParser()
parser.add_argument("--workload", default="mamba2-lm")
parser.add_argument("--preset", default="small")
parser.add_argument("--steps", type=int, default=40)
parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
args = parser.parse_args()

workload = get_workload(args.workload)
cfg = workload.config(args.preset, {})
plan = plan_kernels(workload.kernel_ops(cfg), args.device, False, cfg.dtype)
device = torch.device(args.device)
torch.manual_seed(0)
generator = torch.Generator().manual_seed(0)
with device:
    model = workload.build(cfg, plan)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.1, fused=device.type == "cuda")
batch = workload.batch(cfg, device, generator)
autocast = torch.autocast(device.type, dtype=cfg.autocast_dtype(), enabled=cfg.dtype != "fp32")

for _ in range(args.steps):
    optimizer.zero_grad(set_to_none=True)
    with ssmprof.step(model=model, optimizer=optimizer, items=workload.items_per_step(cfg)):  # ssmprof
        with autocast:
            loss = workload.loss(model, batch)
        loss.backward()
        optimizer.step()
print(f"trained {args.steps} steps, loss {loss.item():.4f}")
