"""A plain training loop over mamba-ssm's own language model class (MambaLMHeadModel: Mamba-2 layers and a few
attention layers), as a user would write it. Small batches make it host-bound on an H100: the step waits for
Python to launch its kernels, which is what `ssmprof profile --script` attributes to lines. The `--plant-*`
options add host costs of known size at known lines, to check that attribution (tests/data/host-time-planted-h100).

    ssmprof profile --script examples/train_mamba_ssm_lm.py --counters none -- --steps 60
    python examples/train_mamba_ssm_lm.py --steps 60        # the same loop, unprofiled
"""

import argparse
import gc
import json
import time

import torch
import torch.nn.functional as F
from mamba_ssm.models.config_mamba import MambaConfig
from mamba_ssm.models.mixer_seq_simple import MambaLMHeadModel

import ssmprof  # ssmprof

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=60)
parser.add_argument("--batch", type=int, default=2)
parser.add_argument("--seq-len", type=int, default=512)
parser.add_argument("--plant-delay-us", type=int, default=0, help="busy-wait this long at one line each step")
parser.add_argument("--plant-sync", action="store_true", help="wait for ~3 ms of GPU work at one line each step")
parser.add_argument("--plant-gc", action="store_true", help="collect garbage over a large heap at one line each step")
parser.add_argument("--plant-log", help="append each step's planted times (ms, one JSON line a step) to this file")
args = parser.parse_args()

config = MambaConfig(d_model=512, n_layer=12, vocab_size=32000, ssm_cfg={"layer": "Mamba2", "headdim": 64},
                     attn_layer_idx=[3, 7, 11], attn_cfg={"num_heads": 8, "causal": True})
torch.manual_seed(0)
model = MambaLMHeadModel(config, device="cuda", dtype=torch.float32)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
tokens = torch.randint(0, config.vocab_size, (args.batch, args.seq_len + 1), device="cuda")
heap = [[i] for i in range(50_000)] if args.plant_gc else []  # what a collection has to walk

for _ in range(args.steps):
    planted = {}
    optimizer.zero_grad(set_to_none=True)
    with ssmprof.step(model=model, optimizer=optimizer, items=args.batch * args.seq_len):  # ssmprof
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(tokens[:, :-1]).logits
            loss = F.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten())
        loss.backward()
        began = time.perf_counter()
        if args.plant_delay_us:
            until = time.perf_counter() + args.plant_delay_us / 1e6
            while time.perf_counter() < until:  # planted delay
                pass
            planted["delay_ms"], began = (time.perf_counter() - began) * 1e3, time.perf_counter()
        if args.plant_sync:
            torch.cuda._sleep(6_000_000)  # about 3 ms of GPU work for the sync to wait for
            began = time.perf_counter()
            torch.cuda.synchronize()  # planted sync
            planted["sync_ms"], began = (time.perf_counter() - began) * 1e3, time.perf_counter()
        if args.plant_gc:
            gc.collect()  # planted collection
            planted["gc_ms"] = (time.perf_counter() - began) * 1e3
        optimizer.step()
    if args.plant_log:
        with open(args.plant_log, "a") as log:
            log.write(json.dumps(planted) + "\n")
print(f"trained {args.steps} steps, loss {loss.item():.4f}")
