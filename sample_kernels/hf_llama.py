"""A Hugging Face LlamaForCausalLM built from a LlamaConfig (random weights, no
hub download), trained or decoded step by step, with a planted host cost at a
known source line. The `profkit host` fixtures (scripts/make_host_fixtures.sh)
are captures of this program.

  --mode train       N steps of forward (bf16 autocast) / backward / fused AdamW step;
                     each step is an NVTX/record_function range "train_step"
  --mode generate    greedy decoding with a KV cache, token by token: a "prefill"
                     range, then one "decode_step" range per new token (--steps tokens);
                     weights in bf16; each token is copied to the host (a sync per
                     token, as a streaming generate does) unless --no-sync-tokens
  --hf-generate      (generate) model.generate() instead of the loop; steps are marked
                     by a LogitsProcessor, so step 0 holds the prefill
  --plant-sleep-ms F planted_host_work(): time.sleep(F/1000) once per step, inside it
  --plant-busy-ms F  planted_busy_work(): a pure-Python busy loop of F ms once per step
  --tiny             a 2-layer, 256-wide model (CPU runs, CI)
  profiling and step annotation flags: see sample_kernels/profiling.py

At start it prints "planted: FILE LINE FUNCTION" for both planted functions; at
the end, per-step host times and (on CUDA) GPU step spacing from CUDA events.

Run: python sample_kernels/hf_llama.py --mode train --steps 12 [--nvtx-steps] [--plant-sleep-ms 5]"""

from __future__ import annotations

import argparse
import contextlib
import inspect
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from sample_kernels.profiling import add_profile_args, device, profiler, slow_kernel, step_range  # noqa: E402

TRAIN_STEP = "train_step"
DECODE_STEP = "decode_step"
PREFILL = "prefill"


def planted_host_work(ms: float) -> None:
    """The planted host cost: the host sleeps (GIL released), the GPU may run dry."""
    time.sleep(ms / 1000)


def planted_busy_work(ms: float) -> None:
    """The planted host cost as pure Python work (GIL held, CPU busy)."""
    end = time.perf_counter() + ms / 1000
    n = 0
    while time.perf_counter() < end:
        n += 1
    return None


def nvtx(name: str):
    """The NVTX step range (torch.cuda.nvtx); nothing on a CPU-only build, which has no NVTX."""
    return torch.cuda.nvtx.range(name) if torch.cuda.is_available() else contextlib.nullcontext()


def plant(args: argparse.Namespace) -> None:
    """Once per step, inside the step."""
    if args.plant_sleep_ms > 0:
        planted_host_work(args.plant_sleep_ms)
    if args.plant_busy_ms > 0:
        planted_busy_work(args.plant_busy_ms)


def add_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--mode", choices=("train", "generate"), default="train")
    parser.add_argument("--steps", type=int, default=12, help="train steps, or new tokens in generate mode")
    parser.add_argument("--tiny", action="store_true", help="2 layers, hidden 256, vocab 2048, seq 64, batch 2")
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--intermediate", type=int, default=2816)
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--kv-heads", type=int, default=16)
    parser.add_argument("--vocab", type=int, default=32000)
    parser.add_argument("--seq", type=int, default=512, help="train sequence length")
    parser.add_argument("--batch", type=int, default=16, help="train batch")
    parser.add_argument("--prompt-len", type=int, default=128, help="generate: prompt tokens")
    parser.add_argument("--gen-batch", type=int, default=1, help="generate: sequences decoded together")
    parser.add_argument("--warmup-tokens", type=int, default=4,
                        help="generate: an unannotated warm-up decode of this many tokens first (0: none)")
    parser.add_argument("--sync-tokens", action=argparse.BooleanOptionalAction, default=True,
                        help="generate: copy each new token to the host (a sync per token)")
    parser.add_argument("--hf-generate", action="store_true", help="generate: model.generate() with a step-marking LogitsProcessor")
    parser.add_argument("--cache-implementation", default=None,
                        help="with --hf-generate: generate()'s cache_implementation ('static': a CUDA graph per token)")
    parser.add_argument("--plant-sleep-ms", type=float, default=0.0)
    parser.add_argument("--plant-busy-ms", type=float, default=0.0)
    add_profile_args(parser)


def build_model(args: argparse.Namespace, dev: torch.device):
    from transformers import LlamaConfig, LlamaForCausalLM

    if args.tiny:
        args.layers, args.hidden, args.intermediate, args.heads, args.kv_heads = 2, 256, 688, 4, 4
        args.vocab, args.seq, args.batch, args.prompt_len = 2048, 64, 2, 16
    config = LlamaConfig(
        vocab_size=args.vocab, hidden_size=args.hidden, intermediate_size=args.intermediate,
        num_hidden_layers=args.layers, num_attention_heads=args.heads, num_key_value_heads=args.kv_heads,
        max_position_embeddings=max(args.seq, args.prompt_len + args.steps + args.warmup_tokens + 8, 2048),
        bos_token_id=1, eos_token_id=2, pad_token_id=0, tie_word_embeddings=False,
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).to(dev)
    n = sum(p.numel() for p in model.parameters())
    print(f"model: LlamaForCausalLM layers={args.layers} hidden={args.hidden} intermediate={args.intermediate} "
          f"heads={args.heads} vocab={args.vocab} params={n / 1e6:.1f}M device={dev}")
    return model


class StepTimer:
    """Host time of each step (perf_counter) and, on CUDA, a CUDA event at each
    step start (no sync) so the GPU's step spacing can be read at the end."""

    def __init__(self, dev: torch.device) -> None:
        self.cuda = dev.type == "cuda"
        self.host_ms: list[float] = []
        self.events: list[torch.cuda.Event] = []
        self._t0 = 0.0

    def start(self) -> None:
        self._t0 = time.perf_counter()
        if self.cuda:
            ev = torch.cuda.Event(enable_timing=True)
            ev.record()
            self.events.append(ev)

    def stop(self) -> None:
        self.host_ms.append((time.perf_counter() - self._t0) * 1000)

    def report(self, label: str, wall_s: float) -> None:
        if self.cuda:
            end = torch.cuda.Event(enable_timing=True)
            end.record()
            torch.cuda.synchronize()
            evs = self.events + [end]
            gpu = [a.elapsed_time(b) for a, b in zip(evs, evs[1:])]
        else:
            gpu = []
        fmt = lambda xs: " ".join(f"{x:.2f}" for x in xs)  # noqa: E731
        print(f"{label} host_step_ms: {fmt(self.host_ms)}")
        if gpu:
            print(f"{label} gpu_step_ms: {fmt(gpu)}")
        steady = (gpu or self.host_ms)[3:] or (gpu or self.host_ms)
        print(f"{label} steady_mean_step_ms={sum(steady) / len(steady):.3f} (steps 3..{len(self.host_ms) - 1}, "
              f"{'CUDA events' if gpu else 'host clock'}) wall_s={wall_s:.3f} steps={len(self.host_ms)}")


def train(args: argparse.Namespace, model, dev: torch.device) -> None:
    model.train()
    fused = dev.type == "cuda"  # fused AdamW on the GPU; the CPU runs take the default
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1, fused=fused or None)
    tokens = torch.randint(3, args.vocab, (args.batch, args.seq), device=dev)
    timer = StepTimer(dev)
    t0 = time.perf_counter()
    with profiler(args, args.steps) as prof:
        for step in range(args.steps):
            timer.start()
            with step_range(args, TRAIN_STEP, nvtx(TRAIN_STEP)):
                optimizer.zero_grad(set_to_none=True)
                with torch.autocast(device_type=dev.type, dtype=torch.bfloat16):
                    loss = model(input_ids=tokens, labels=tokens).loss
                plant(args)
                slow_kernel(args)
                loss.backward()
                optimizer.step()
            timer.stop()
            prof.step()
        if dev.type == "cuda":
            torch.cuda.synchronize()
    wall = time.perf_counter() - t0
    print(f"final loss {loss.item():.4f}")
    timer.report("train", wall)


def decode(args: argparse.Namespace, model, prompt: torch.Tensor, n: int, *, annotate: bool,
           prof=None, timer: StepTimer | None = None) -> list[list[int]]:
    """Greedy decoding with the KV cache, one model call per token."""
    quiet = argparse.Namespace(nvtx_steps=False, annotate_steps=False)
    ann = args if annotate else quiet
    out_tokens: list[list[int]] = []
    # transformers 5.x renamed past_key_values to cache (argument and output); take whichever exists
    cache_arg = "cache" if "cache" in inspect.signature(type(model).forward).parameters else "past_key_values"
    with step_range(ann, PREFILL, nvtx(PREFILL)):
        out = model(input_ids=prompt, use_cache=True)
        past = getattr(out, cache_arg)
        next_tok = out.logits[:, -1, :].argmax(dim=-1, keepdim=True)
    for _ in range(n):
        if timer:
            timer.start()
        with step_range(ann, DECODE_STEP, nvtx(DECODE_STEP)):
            out = model(input_ids=next_tok, use_cache=True, **{cache_arg: past})
            past = getattr(out, cache_arg)
            if annotate:
                plant(args)
                slow_kernel(args)
            next_tok = out.logits[:, -1, :].argmax(dim=-1, keepdim=True)
            if args.sync_tokens:
                out_tokens.append(next_tok.view(-1).tolist())
        if timer:
            timer.stop()
        if prof is not None:
            prof.step()
    return out_tokens


def hf_generate(args: argparse.Namespace, model, prompt: torch.Tensor, prof, timer: StepTimer) -> None:
    """model.generate(); a LogitsProcessor ends one step and starts the next after
    each token's logits, so step 0 holds the prefill."""
    from transformers import LogitsProcessor, LogitsProcessorList

    class StepMarker(LogitsProcessor):
        def __init__(self) -> None:
            self.stack: contextlib.ExitStack | None = None
            self.done = 0

        def open(self) -> None:
            timer.start()
            self.stack = contextlib.ExitStack()
            self.stack.enter_context(step_range(args, DECODE_STEP, nvtx(DECODE_STEP)))

        def __call__(self, input_ids, scores):
            plant(args)
            slow_kernel(args)
            self.stack.close()
            timer.stop()
            prof.step()
            self.done += 1
            if self.done < args.steps:
                self.open()
            return scores

    marker = StepMarker()
    marker.open()
    model.generate(input_ids=prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=args.steps,
                   min_new_tokens=args.steps, do_sample=False, pad_token_id=0,
                   logits_processor=LogitsProcessorList([marker]),
                   **({"cache_implementation": args.cache_implementation} if args.cache_implementation else {}))
    if marker.stack is not None and marker.done < args.steps:  # generate stopped early
        marker.stack.close()
        timer.stop()


def generate(args: argparse.Namespace, model, dev: torch.device) -> None:
    model.eval()
    model.to(torch.bfloat16)
    prompt = torch.randint(3, args.vocab, (args.gen_batch, args.prompt_len), device=dev)
    timer = StepTimer(dev)
    with torch.inference_mode():
        if args.warmup_tokens > 0:  # cuBLAS handles, allocator, lazy init: outside the step ranges
            decode(args, model, prompt, args.warmup_tokens, annotate=False)
        if dev.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        with profiler(args, args.steps) as prof:
            if args.hf_generate:
                hf_generate(args, model, prompt, prof, timer)
            else:
                toks = decode(args, model, prompt, args.steps, annotate=True, prof=prof, timer=timer)
                if toks:
                    print("tokens[0]:", " ".join(str(t[0]) for t in toks))
            if dev.type == "cuda":
                torch.cuda.synchronize()
        wall = time.perf_counter() - t0
    timer.report("generate", wall)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_args(parser)
    args = parser.parse_args()
    here = str(Path(__file__).resolve())
    for fn in (planted_host_work, planted_busy_work):
        # the def line, then the line the host spends its time on (time.sleep / the loop test)
        lines, first = inspect.getsourcelines(fn)
        hot = next(first + i for i, text in enumerate(lines) if "time.sleep" in text or "while " in text)
        print("planted:", here, fn.__code__.co_firstlineno, fn.__name__, "hot_line", hot)
    print(f"plant_sleep_ms={args.plant_sleep_ms} plant_busy_ms={args.plant_busy_ms} mode={args.mode} steps={args.steps}")
    import transformers

    print("torch", torch.__version__, "transformers", transformers.__version__)
    dev = device()
    model = build_model(args, dev)
    if args.mode == "train":
        train(args, model, dev)
    else:
        generate(args, model, dev)


if __name__ == "__main__":
    main()
