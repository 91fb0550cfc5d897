"""A small GPT-style decoder trained on random tokens: token + position
embeddings, pre-LayerNorm blocks with causal self-attention
(F.scaled_dot_product_attention) and a GELU MLP, a tied output head, AdamW.
Sized so 30 steps take seconds on one GPU; the fixtures under tests/data/kineto
and tests/data/nsys (nsys2025_gpt_*) are traces of this loop.

  --compile          torch.compile the model (inductor)
  --compile-mode M   torch.compile's mode (implies --compile): reduce-overhead
                     replays the forward and backward passes as CUDA graphs
  --print-loss       print loss.item() every step (a sync per step)
  profiling and step annotation flags: see sample_kernels/profiling.py

Run: python sample_kernels/gpt.py --steps 30 [--compile] [--profile torch --trace-out t.json.gz]"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from sample_kernels.profiling import add_profile_args, device, profiler, slow_kernel, step_range  # noqa: E402

STEP_RANGE = "train_step"


class CausalSelfAttention(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, dim = x.shape
        q, k, v = self.qkv(x).split(dim, dim=2)
        # (batch, heads, seq, head_dim) for scaled_dot_product_attention
        q, k, v = (t.view(batch, seq, self.heads, dim // self.heads).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(batch, seq, dim))


class Block(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(dim)
        self.attn = CausalSelfAttention(dim, heads)
        self.ln2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, vocab: int, seq: int, dim: int, layers: int, heads: int) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(seq, dim)
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)
        self.head.weight = self.tok.weight  # tied, as in GPT-2
        for p in self.parameters():
            if p.dim() > 1:
                nn.init.normal_(p, std=0.02 / math.sqrt(2 * layers))

    def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(idx.shape[1], device=idx.device)
        x = self.tok(idx) + self.pos(positions)
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))


def add_model_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--vocab", type=int, default=2048)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--dim", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--compile", action="store_true", help="torch.compile the model")
    parser.add_argument("--compile-mode", default=None,
                        choices=("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"),
                        help="torch.compile mode (implies --compile); reduce-overhead uses CUDA graphs")
    parser.add_argument("--print-loss", action="store_true", help="print loss.item() every step (syncs)")
    add_profile_args(parser)


def build(args: argparse.Namespace) -> tuple[nn.Module, torch.optim.Optimizer, torch.Tensor, torch.Tensor]:
    """Model, AdamW and one fixed random batch (inputs, next-token targets)."""
    torch.manual_seed(0)
    dev = device()
    model = GPT(args.vocab, args.seq, args.dim, args.layers, args.heads).to(dev)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
    tokens = torch.randint(args.vocab, (args.batch, args.seq + 1), device=dev)
    return model, optimizer, tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()


def train(args: argparse.Namespace, model: nn.Module, optimizer: torch.optim.Optimizer,
          x: torch.Tensor, y: torch.Tensor, extra_work=None) -> list[float]:
    """The training loop; returns the losses (read once at the end unless --print-loss).
    extra_work(step), when given, runs inside each step before the backward pass."""
    graphs = args.compile_mode in ("reduce-overhead", "max-autotune")
    if args.compile or args.compile_mode:
        step_fn = torch.compile(model, mode=args.compile_mode)
    else:
        step_fn = model
    losses = torch.zeros(args.steps, device=x.device)
    with profiler(args, args.steps) as prof:
        for step in range(args.steps):
            with step_range(args, STEP_RANGE):
                if graphs:
                    # a new iteration: the CUDA graphs' output buffers may be reused from here on
                    torch.compiler.cudagraph_mark_step_begin()
                optimizer.zero_grad(set_to_none=True)
                loss = step_fn(x, y)
                if extra_work is not None:
                    extra_work(step)
                slow_kernel(args)
                loss.backward()
                optimizer.step()
                if args.print_loss:
                    print(f"step {step} loss {loss.item():.5f}")
                else:
                    losses[step] = loss.detach()
            prof.step()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
    return losses.tolist()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_args(parser)
    args = parser.parse_args()
    model, optimizer, x, y = build(args)
    losses = train(args, model, optimizer, x, y)
    if not args.print_loss:
        print("losses:", " ".join(f"{v:.4f}" for v in losses))


if __name__ == "__main__":
    main()
