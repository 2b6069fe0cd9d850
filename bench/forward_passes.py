"""Forward passes of surecall's decode loop, timed one by one and grouped by shape.

The end-to-end benchmark's prompts go through the decode loop ``--rounds`` times in one
process, each with its schema and unconstrained. Every forward pass is timed on its own
(the device synchronized before and after it) and recorded with its shape: the tokens fed
(the prompt, one sampled token, or one plus a run of forced tokens) and the cache length
before it. A shape is *new* the first time this process runs a pass of it.

The report gives, per round and loop, passes, tokens and seconds, and the mean time of a
pass of one token and of several, new shapes and seen ones apart. On a GPU this separates
what a shape costs the first time (kernel choice, cuDNN's attention plans) from the steady
state, and shows what the forced-token fast path saves once shapes are warm.

``--cudnn-attention`` leaves torch's attention backends as they are instead of switching
cuDNN's off for the loop's passes (``decode.attention_without_cudnn``): run it with and
without, each in a fresh process, to compare.

Run: ``python -m bench.forward_passes --device cuda [--rounds 3] [--out FILE.json]``.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import time
from pathlib import Path

LOOPS = ("constrained", "unconstrained")


@contextlib.contextmanager
def timed_passes(records: list[dict], synchronize):
    """Records every forward pass of the decode loop while inside: width, cache length, seconds."""
    from surecall.adapters.transformers import decode as decode_module

    original = decode_module._BatchDecoder._forward

    @functools.wraps(original)
    def timed(self, live):
        width = max(len(row.pending) for row in live)
        cached = 0 if self._attention is None else int(self._attention.shape[1])
        synchronize()
        start = time.perf_counter()
        logits = original(self, live)
        synchronize()
        records.append({"width": width, "cached": cached, "seconds": time.perf_counter() - start})
        return logits

    decode_module._BatchDecoder._forward = timed
    try:
        yield
    finally:
        decode_module._BatchDecoder._forward = original


@contextlib.contextmanager
def default_attention_backends():
    """The decode loop's passes under torch's own attention backends (cuDNN's included)."""
    from surecall.adapters.transformers import decode as decode_module

    original = decode_module.attention_without_cudnn
    decode_module.attention_without_cudnn = lambda device: contextlib.nullcontext()
    try:
        yield
    finally:
        decode_module.attention_without_cudnn = original


def _mean_ms(passes: list[dict]) -> float | None:
    return round(1000 * sum(p["seconds"] for p in passes) / len(passes), 2) if passes else None


def summarize(passes: list[dict]) -> dict:
    """Counts and mean pass times (ms) of one run's passes, by width and by whether the
    shape was new. The prompt's pass (the first) is left out of the means: its width is
    the prompt's, a shape no other pass has."""
    steps = passes[1:]
    one = [p for p in steps if p["width"] == 1]
    several = [p for p in steps if p["width"] > 1]
    return {
        "passes": len(passes),
        "seconds": round(sum(p["seconds"] for p in passes), 4),
        "prompt_pass_ms": _mean_ms(passes[:1]),
        "one_token_new_ms": _mean_ms([p for p in one if p["new"]]),
        "one_token_seen_ms": _mean_ms([p for p in one if not p["new"]]),
        "several_new_ms": _mean_ms([p for p in several if p["new"]]),
        "several_seen_ms": _mean_ms([p for p in several if not p["new"]]),
        "widths": sorted({p["width"] for p in several}),
    }


def run(local_model, *, rounds: int = 3, max_tokens: int = 96, prompts=None, log=print) -> list[dict]:
    """One row per (round, prompt, loop): the decode result's counts and ``summarize`` of its passes."""
    import torch

    from bench.e2e_bench import PROMPTS, prompt_cases
    from surecall import grammar_from_schema
    from surecall.adapters.transformers.decode import decode

    prompts = PROMPTS if prompts is None else prompts
    schemas, prompt_ids = prompt_cases(local_model.tokenizer, prompts)
    grammars = {name: grammar_from_schema(schemas[name]) for name, _ in prompts}
    synchronize = torch.cuda.synchronize if torch.device(local_model.device).type == "cuda" else (lambda: None)

    seen: set[tuple[int, int]] = set()
    rows = []
    for round_number in range(1, rounds + 1):
        for name, _ in prompts:
            for loop in LOOPS:
                records: list[dict] = []
                with timed_passes(records, synchronize):
                    result = decode(local_model, prompt_ids[name], grammars[name] if loop == "constrained" else None,
                                    max_tokens=max_tokens)
                for record in records:
                    shape = (record["width"], record["cached"])
                    record["new"] = shape not in seen
                    seen.add(shape)
                row = {"round": round_number, "prompt": name, "loop": loop, "tokens": result.completion_tokens,
                       "forward_passes": result.forward_passes, **summarize(records)}
                rows.append(row)
                log(f"[passes] round {round_number} {name:20} {loop:13} {row['tokens']:3} tokens "
                    f"{row['passes']:3} passes {1000 * row['seconds']:8.1f} ms  one token new/seen "
                    f"{row['one_token_new_ms']}/{row['one_token_seen_ms']} ms  several new/seen "
                    f"{row['several_new_ms']}/{row['several_seen_ms']} ms")
    return rows


def main(argv=None) -> list[dict]:
    import os

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default=None, help="cpu or cuda (default: CUDA when available)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=96)
    parser.add_argument("--cudnn-attention", action="store_true",
                        help="keep torch's attention backends (cuDNN's included) for the loop's passes")
    parser.add_argument("--out", type=Path, help="write the rows as JSON here")
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.max_tokens < 1:
        parser.error("--rounds and --max-tokens must be at least 1")

    import surecall

    local_model = surecall.load_model(device=args.device)
    backends = default_attention_backends() if args.cudnn_attention else contextlib.nullcontext()
    with backends:
        rows = run(local_model, rounds=args.rounds, max_tokens=args.max_tokens)
    if args.out is not None:
        meta = {"device": str(local_model.device), "cudnn_attention": args.cudnn_attention,
                "max_tokens": args.max_tokens}
        args.out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    return rows


if __name__ == "__main__":
    main()
