"""Fills of 128 to 411 M elements, fp32 and bf16, each by `fill_` and `zero_`, twice: run under ncu (README)."""
import torch

shapes = [(8192, 1024), (16, 512, 1024), (50280, 1024), (8192, 50280), (128,), (4096,)]
xs = [torch.empty(s, device="cuda", dtype=dt) for s in shapes for dt in (torch.float32, torch.bfloat16)]
for _ in range(2):
    for x in xs:
        x.fill_(0)  # aten::fill_ (vectorized_elementwise_kernel FillFunctor)
        x.zero_()
torch.cuda.synchronize()
