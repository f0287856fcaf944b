"""Is our mamba2-lm as fast as mamba-ssm's own MambaLMHeadModel at the same config? (goal: within 3 %)

Both models train in one process with the same harness (same AdamW, autocast, batch, timing), in
alternating rounds so clock or thermal drift hits both alike. A gap here would mean our model code
adds work the reference does not do, which would make every characterization unrepresentative.

    python benchmarks/bench_lm_vs_mamba_ssm.py [--preset small] [--layers N] [--rounds 10] [--steps 10]
"""

import argparse
import json
import statistics

import torch
from torch import nn

from ssmprof.kernels import mamba_ssm, plan_kernels
from ssmprof.profiler.harness import Trainer, time_steps
from ssmprof.profiler.markers import PhaseMarker
from ssmprof.workloads.lm import Mamba2Config, Mamba2LM


class MambaSsmLM(Mamba2LM):
    """The same workload (batch, loss, optimizer) on mamba-ssm's reference model."""

    def build(self, cfg: Mamba2Config, plan) -> nn.Module:  # type: ignore[override]  # mamba-ssm's own model
        ssm = mamba_ssm()
        config = ssm.models.config_mamba.MambaConfig(
            d_model=cfg.d_model, n_layer=cfg.layers, d_intermediate=0, vocab_size=cfg.vocab_size,
            ssm_cfg={"layer": "Mamba2", "d_state": cfg.d_state, "headdim": cfg.headdim, "expand": cfg.expand,
                     "ngroups": cfg.ngroups, "chunk_size": cfg.chunk_size},
            rms_norm=True, residual_in_fp32=True, fused_add_norm=True, pad_vocab_size_multiple=8,
            tie_embeddings=True)
        return LogitsOnly(ssm.MambaLMHeadModel(config))


class LogitsOnly(nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids):
        return self.model(input_ids).logits


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--preset", default="small")
    parser.add_argument("--layers", help="override the preset's layer count (both models must fit at once)")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--steps", type=int, default=10, help="steps per model per round")
    parser.add_argument("--json")
    args = parser.parse_args()

    ours, theirs = Mamba2LM(), MambaSsmLM()
    cfg = ours.config(args.preset, {"layers": args.layers} if args.layers else {})
    plan = plan_kernels(ours.ops, "cuda", dtype=cfg.dtype)
    trainers = {"ssmprof mamba2-lm": Trainer(ours, cfg, plan, PhaseMarker()),
                "mamba_ssm MambaLMHeadModel": Trainer(theirs, cfg, plan, PhaseMarker())}
    for name, trainer in trainers.items():
        params = sum(p.numel() for p in trainer.model.parameters())
        print(f"{name}: {params / 1e6:.1f} M parameters")
        for _ in range(3):  # Triton compile + autotune stay out of the timing
            trainer.step()
    torch.cuda.synchronize()
    # Alternate the models round by round so drift (clocks, host jitter) hits both alike; the paired
    # per-round ratio is what the verdict uses.
    times: dict[str, list[float]] = {name: [] for name in trainers}
    round_ratios = []
    for _ in range(args.rounds):
        medians = {}
        for name, trainer in trainers.items():
            _, step_ms = time_steps(trainer, args.steps)
            times[name] += step_ms
            medians[name] = statistics.median(step_ms)
        ours_ms, ref_ms = medians.values()
        round_ratios.append(ref_ms / ours_ms)
    tokens = ours.items_per_step(cfg)
    print(f"\n{args.preset}: batch {cfg.batch_size} x seq {cfg.seq_len}, {cfg.layers} layers, d_model {cfg.d_model}, "
          f"{torch.cuda.get_device_name()}, {args.rounds} rounds x {args.steps} steps each")
    print(f"{'model':<28}{'median ms':>11}{'p10 ms':>9}{'p90 ms':>9}{'tokens/s':>14}")
    summary = {}
    for name, values in times.items():
        ms = statistics.median(values)
        deciles = statistics.quantiles(values, n=10)
        summary[name] = {"step_ms": ms, "p10_ms": deciles[0], "p90_ms": deciles[-1],
                         "tokens_per_s": tokens / (ms / 1e3)}
        print(f"{name:<28}{ms:>11.2f}{deciles[0]:>9.2f}{deciles[-1]:>9.2f}{tokens / (ms / 1e3):>14,.0f}")
    ratio = statistics.median(round_ratios)
    verdict = "PASS" if abs(ratio - 1) <= 0.03 else "FAIL"
    print(f"throughput ratio ours/reference, median of per-round ratios = {ratio:.3f} "
          f"(rounds: {min(round_ratios):.3f}..{max(round_ratios):.3f}) -> {verdict} (goal within +-3 %)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"preset": args.preset, "layers": cfg.layers, "models": summary, "round_ratios": round_ratios,
                       "ratio": ratio, "verdict": verdict}, f, indent=2)


if __name__ == "__main__":
    main()
