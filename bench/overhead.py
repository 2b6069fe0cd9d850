"""Per-token cost of budget-aware masking and of ASAp reweighting, against plain masking.

Times are process CPU time (the machine may be shared), measured on the SmolLM2 vocabulary (49k tokens) with the benchmark's person
and product schemas, without a model, so that only the engine's work is timed:

* budget-aware masking: the same valid token sequences (the schema instances of
  ``bench/budget_demo.py``, tokenized) replayed through ``Matcher(grammar, vocab)``
  and ``Matcher(grammar, vocab, max_tokens=len + slack)`` with a tight (2) and a loose
  (64) slack: ``fill_bitmask`` + ``advance`` per token, first pass (masks computed) and
  warm passes (masks cached);
* ASAp: ``AlignedSampler.sample`` against plain constrained sampling (mask, softmax
  over the allowed tokens, draw, advance) with the same budgeted matcher and a model
  callable that returns fixed random log-probabilities at no cost;
* for scale, one SmolLM2-135M forward pass with KV cache on this machine (``--model``).

Run: ``python -m bench.overhead [--model]`` (writes ``bench/results/overhead.json``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import tracemalloc

import numpy as np

from bench.asap_example import constrained_sample
from bench.budget_demo import PEOPLE, PRODUCTS, PERSON_SCHEMA, PRODUCT_SCHEMA, RESULTS_DIR
from bench.vocabularies import encode, load_tokenizer

# A tight budget (the mask must drop tokens after which the rest no longer fits) and a
# loose one (the budget never binds, only the check runs).
BUDGET_SLACKS = {"budget_aware_tight": 2, "budget_aware_loose": 64}


def _instances() -> list[tuple[dict, str]]:
    people = [(PERSON_SCHEMA, json.dumps({"name": n, "age": a, "city": c}, separators=(",", ":"))) for n, a, c in PEOPLE]
    products = [
        (PRODUCT_SCHEMA, json.dumps({"product": p, "price": v, "tags": t}, separators=(",", ":")))
        for p, v, t in PRODUCTS
    ]
    return people + products


def _replay(matcher, tokens, words) -> float:
    started = time.process_time()
    for token in tokens:
        matcher.fill_bitmask(words)
        matcher.advance(token)
    return time.process_time() - started


def measure_budget_masking(vocab, tokenizer, passes: int = 5) -> dict:
    from surecall.engine import Matcher
    from surecall.output_types import OutputSpec

    grammars = {id(schema): OutputSpec.of(schema).grammar for schema in (PERSON_SCHEMA, PRODUCT_SCHEMA)}
    sequences = [(grammars[id(schema)], encode(tokenizer, text)) for schema, text in _instances()]
    words = np.zeros((vocab.size + 31) // 32, dtype=np.int32)
    total_tokens = sum(len(tokens) for _, tokens in sequences)
    result = {}
    for mode in ("plain", *BUDGET_SLACKS):
        per_pass = []
        for _ in range(passes):
            seconds = 0.0
            for grammar, tokens in sequences:
                budget = len(tokens) + BUDGET_SLACKS[mode] if mode in BUDGET_SLACKS else None
                seconds += _replay(Matcher(grammar, vocab, max_tokens=budget), tokens, words)
            per_pass.append(seconds / total_tokens * 1e6)
        result[mode] = {"first_pass_us_per_token": per_pass[0], "warm_us_per_token": statistics.median(per_pass[1:])}
        if mode != "plain":
            result[mode]["warm_ratio"] = result[mode]["warm_us_per_token"] / result["plain"]["warm_us_per_token"]
    result["tokens_per_pass"] = total_tokens
    return result


def measure_aligned_sampling(vocab, samples: int = 40, max_tokens: int = 40, seed: int = 0) -> dict:
    from surecall.engine import AlignedSampler, Matcher
    from surecall.output_types import OutputSpec

    grammar = OutputSpec.of(PERSON_SCHEMA).grammar
    rng = np.random.default_rng(seed)
    fixed = rng.normal(scale=3.0, size=vocab.size)
    fixed -= np.log(np.exp(fixed - fixed.max()).sum()) + fixed.max()

    def model(_prefix):
        return fixed

    eos = tuple(sorted(vocab.eos_token_ids))
    matcher = Matcher(grammar, vocab, max_tokens=max_tokens)
    # warm the mask caches along the states both samplers will visit
    for _ in range(3):
        constrained_sample(matcher, model, rng, eos)
    started = time.process_time()
    plain_tokens = 0
    for _ in range(samples):
        plain_tokens += len(constrained_sample(matcher, model, rng, eos)) + 1
    plain_us = (time.process_time() - started) / plain_tokens * 1e6

    sampler = AlignedSampler(matcher, seed=seed, eos_token_ids=eos)
    started = time.process_time()
    aligned_tokens = 0
    for _ in range(samples):
        draw = sampler.sample(model)
        aligned_tokens += len(draw.token_ids) + 1
    aligned_us = (time.process_time() - started) / aligned_tokens * 1e6
    return {
        "samples": samples,
        "plain_us_per_token": plain_us,
        "aligned_us_per_token": aligned_us,
        "ratio": aligned_us / plain_us,
        "trie_nodes": sampler.node_count,
    }


def measure_trie_memory(samples: int = 3000) -> dict:
    """Bytes per trie node, on a binary vocabulary whose matcher caches are negligible."""
    from surecall.engine import AlignedSampler, Grammar, Matcher, TokenVocabulary

    from bench.asap_example import EOS, binary_string_model

    vocab = TokenVocabulary([b"0", b"1", b"</s>"], special_ids=[EOS], eos_token_ids=[EOS])
    sampler = AlignedSampler(Matcher(Grammar.from_regex("[01]{1,16}"), vocab), seed=0)
    sampler.sample_many(binary_string_model, 20)  # compile and cache the automaton first
    tracemalloc.start()
    before, nodes_before = tracemalloc.get_traced_memory()[0], sampler.node_count
    sampler.sample_many(binary_string_model, samples)
    grown = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    added = sampler.node_count - nodes_before
    return {"nodes_added": added, "bytes_per_node": grown / max(1, added)}


def measure_forward_pass(steps: int = 20) -> dict:
    import torch
    from transformers import DynamicCache

    from surecall.adapters.transformers.loading import load_model

    local_model = load_model()
    prompt = torch.tensor([encode(local_model.tokenizer, "Return the person as JSON.")], device=local_model.device)
    # Filled in place by each forward pass (also under transformers that rename the argument).
    cache = {local_model.cache_argument: DynamicCache()}
    with torch.inference_mode():
        token = local_model.model(input_ids=prompt, use_cache=True, **cache).logits[:, -1:].argmax(-1)
        started = time.process_time()
        for _ in range(steps):
            token = local_model.model(input_ids=token, use_cache=True, **cache).logits[:, -1:].argmax(-1)
        seconds = time.process_time() - started
    return {"us_per_token": seconds / steps * 1e6, "device": str(local_model.device)}


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", action="store_true", help="also time a SmolLM2 forward pass for scale")
    args = parser.parse_args(argv)
    from surecall.engine import TokenVocabulary

    tokenizer = load_tokenizer("smollm2")
    vocab = TokenVocabulary.from_tokenizer(tokenizer)
    report = {
        "budget_masking": measure_budget_masking(vocab, tokenizer),
        "aligned_sampling": measure_aligned_sampling(vocab),
        "trie_memory": measure_trie_memory(),
    }
    if args.model:
        report["model_forward"] = measure_forward_pass()
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    (RESULTS_DIR / "overhead.json").write_text(json.dumps(report, indent=2))
    print(json.dumps(report, indent=2))
    return report


if __name__ == "__main__":
    main()
