"""Hugging Face generate() on a small Llama built from a config (random weights), one generate()
call of --new-tokens tokens per step, with a static cache (--cache static: HF compiles the decode
step and replays it as CUDA graphs) or the default dynamic cache; a planted 2 ms host sleep
between calls ("slow").

Truth: --steps steps; with --cache static most decode kernels run inside CUDA graphs (so no advice to
use CUDA graphs) and torch.compile's compile time is start-up, not a stall of the steps.
Needs transformers (pip install transformers); --dry runs a 2-layer model on the CPU."""

from __future__ import annotations

import time

import torch

import zoo_common as zoo


def main() -> None:
    ap = zoo.parser(__doc__)
    ap.add_argument("--cache", choices=["static", "dynamic"], default="static")
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--warmup-calls", type=int, default=2, help="generate() calls before the loop (compiling)")
    ap.add_argument("--layers", type=int, default=8, help="decoder layers (fewer: a smaller export)")
    args = ap.parse_args()
    device = zoo.setup(args)
    from transformers import LlamaConfig, LlamaForCausalLM

    small = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2) if args.dry else dict(hidden_size=1024, intermediate_size=2816,
                                                              num_hidden_layers=args.layers, num_attention_heads=16,
                                                              num_key_value_heads=8)
    config = LlamaConfig(vocab_size=32000, max_position_embeddings=1024, **small)
    dtype = torch.float32 if args.dry else torch.bfloat16
    model = LlamaForCausalLM(config).to(device=device, dtype=dtype).eval()
    prompt = torch.randint(0, config.vocab_size, (1, 16 if args.dry else 128), device=device)
    kwargs = dict(max_new_tokens=2 if args.dry else args.new_tokens, do_sample=False,
                  min_new_tokens=2 if args.dry else args.new_tokens, pad_token_id=0)
    if args.cache == "static":
        kwargs["cache_implementation"] = "static"
    with torch.inference_mode():
        for _ in range(args.warmup_calls):
            model.generate(prompt, **kwargs)
        with zoo.profiler(args, device) as prof:
            loop = zoo.Steps(args, device, prof)
            for _ in loop:
                out = model.generate(prompt, **kwargs)
                zoo.plant_next("slow", "time.sleep")
                time.sleep(0.002)
    print(f"ZOO_TRUTH {{\"cache\": \"{args.cache}\", \"new_tokens\": {out.shape[1] - prompt.shape[1]}}}")
    loop.report()


if __name__ == "__main__":
    main()
