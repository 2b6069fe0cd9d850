"""End-to-end throughput: tokens per second on the embedded model, constrained and not.

Same prompts, same greedy decoding, same ``max_tokens`` for every entry:

* ``unconstrained``: ``model.generate`` with no processor;
* each peer engine: ``model.generate`` with one masking logits processor over the
  engine's matcher (the same processor for all peers, so only the engine differs);
* ``surecall (processor)``: ``model.generate`` with ``SurecallLogitsProcessor``;
* ``surecall (decode)``: surecall's own decode loop, forced-token fast path on;
* ``unconstrained (decode)``: the same loop without a grammar, its own baseline.

Grammars are compiled before the clock starts (their cost is the mask benchmark's
time to first mask). Every prompt goes once through both unconstrained loops, and each
constrained path once through a schema no timed run uses, before any clock starts: on a
GPU the first forward pass over a shape and the first masking op cost far more than
later ones, a cost that would otherwise fall on whichever entry ran first. Tokens per
second = completion tokens (EOS excluded) / seconds. Every constrained output is parsed
and validated against its schema.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
if __name__ == "__main__":
    # Run as a script: import `bench.*` from the repository root.
    sys.path[0] = str(REPO_ROOT)

import numpy as np  # noqa: E402

PROMPTS = (
    ("get_weather", "What will the weather be like in Lisbon, Portugal for the next 3 days? Use celsius."),
    ("classify_ticket", "Classify this support ticket: 'I was charged twice for my March invoice and "
                        "nobody answers my emails. Please fix this today.'"),
    ("product_extraction", "Extract the product: 'The Aurora X2 desk lamp by Lumio costs 49.90 EUR, "
                           "is in stock, rated 4.4 stars, in lighting and office.'"),
)


#: The constrained paths' untimed first run: keys and types none of the timed schemas share.
WARM_UP_SCHEMA = {
    "type": "object",
    "properties": {"answer": {"type": "string", "maxLength": 40}, "confident": {"type": "boolean"}},
    "required": ["answer", "confident"],
    "additionalProperties": False,
}


def prompt_cases(tokenizer, prompts) -> tuple[dict, dict]:
    """({prompt name: its schema}, {prompt name: its chat prompt's token ids})."""
    from bench.cases import builtin_cases

    schemas = {case.id: case.schema for case in builtin_cases([name for name, _ in prompts])}
    return schemas, {name: chat_prompt(tokenizer, task, schemas[name]) for name, task in prompts}


def chat_prompt(tokenizer, task: str, schema: dict) -> list[int]:
    messages = [
        {"role": "system", "content": "Answer with one JSON object that matches this JSON Schema: "
                                      + json.dumps(schema)},
        {"role": "user", "content": task},
    ]
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    if isinstance(ids, dict) or hasattr(ids, "keys"):
        ids = ids["input_ids"]
    return list(ids)


def _logits_processor_class():
    from transformers import LogitsProcessor

    class SessionLogitsProcessor(LogitsProcessor):
        """Masks generate's scores with a bench.peers session (batch of one)."""

        def __init__(self, session, prompt_length: int):
            self.session = session
            self.prompt_length = prompt_length

        def __call__(self, input_ids, scores):
            import torch

            if input_ids.shape[1] > self.prompt_length:
                self.session.advance(int(input_ids[0, -1]))
            self.session.fill_mask()
            width = scores.shape[-1]
            bits = np.unpackbits(self.session.bitmask.view(np.uint8), bitorder="little")[:width]
            allowed = torch.from_numpy(bits.astype(bool)).to(scores.device)
            return scores.masked_fill(~allowed, float("-inf"))

    return SessionLogitsProcessor


def _validity(text: str, schema: dict) -> bool:
    import jsonschema

    try:
        value = json.loads(text)
    except ValueError:
        return False
    return jsonschema.Draft202012Validator(schema).is_valid(value)


class _Generator:
    """Times ``model.generate`` and surecall's decode loop on one loaded model."""

    def __init__(self, local_model, max_tokens: int):
        import torch

        self.local_model = local_model
        self.model = local_model.model
        self.tokenizer = local_model.tokenizer
        self.device = local_model.device
        self.max_tokens = max_tokens
        configured = self.model.generation_config.eos_token_id
        # Every id some engine may end on: the tokenizer's EOS (a peer's stop token) is not
        # always the generation config's (transformers 5.17 reads <|im_start|> as the GGUF
        # tokenizer's EOS), and generate must stop wherever the engine finished.
        self.eos_ids = sorted({self.tokenizer.eos_token_id, *local_model.vocabulary.eos_token_ids,
                               *np.atleast_1d(configured if configured is not None else []).tolist()})
        self.torch = torch

    def _sync(self) -> None:
        if self.device.type == "cuda":
            self.torch.cuda.synchronize()

    def generate(self, prompt_ids: list[int], processor=None) -> tuple[str, int, float]:
        from transformers import LogitsProcessorList

        torch = self.torch
        inputs = torch.tensor([prompt_ids], device=self.device)
        kwargs = {"logits_processor": LogitsProcessorList([processor])} if processor is not None else {}
        self._sync()
        start = time.perf_counter()
        with torch.inference_mode():
            output = self.model.generate(
                inputs, attention_mask=torch.ones_like(inputs), max_new_tokens=self.max_tokens,
                do_sample=False, pad_token_id=self.tokenizer.eos_token_id, eos_token_id=self.eos_ids, **kwargs,
            )
        self._sync()
        seconds = time.perf_counter() - start
        completion = output[0, len(prompt_ids):].tolist()
        while completion and completion[-1] in self.eos_ids:
            completion.pop()
        return self.tokenizer.decode(completion), len(completion), seconds

    def decode(self, prompt_ids: list[int], grammar) -> tuple[str, int, float]:
        from surecall.adapters.transformers.decode import decode

        self._sync()
        start = time.perf_counter()
        result = decode(self.local_model, prompt_ids, grammar, max_tokens=self.max_tokens)
        self._sync()
        seconds = time.perf_counter() - start
        return result.text, result.completion_tokens, seconds


def _record(name: str, runs: list[dict]) -> dict:
    tokens = sum(r["tokens"] for r in runs)
    seconds = sum(r["seconds"] for r in runs)
    return {
        "engine": name,
        "tokens": tokens,
        "seconds": round(seconds, 4),
        "tokens_per_s": round(tokens / seconds, 2) if seconds else None,
        "valid_outputs": sum(bool(r.get("valid")) for r in runs),
        "compile_errors": sum("error" in r for r in runs),
        "runs": runs,
    }


def run_e2e(engine_names, *, max_tokens: int = 64, device: str | None = None, prompts=PROMPTS,
            log=print) -> dict:
    import surecall
    from bench.peers import ENGINES, SURECALL_NAMES, CompileError, surecall_available

    start = time.perf_counter()
    local_model = surecall.load_model(device=device)
    load_s = time.perf_counter() - start
    generator = _Generator(local_model, max_tokens)
    tokenizer = local_model.tokenizer
    schemas, prompt_ids = prompt_cases(tokenizer, prompts)
    processor_class = _logits_processor_class()
    log(f"[e2e] model {local_model.name} on {local_model.device} loaded in {load_s:.1f}s")

    # Untimed: every prompt once through both unconstrained loops, and each constrained path
    # once on a schema the timed runs do not use (so no engine starts with its timed grammar
    # warm). One-off start-up costs then land on nobody: on a GPU, what a forward pass over
    # a new shape or a first masking op costs once.
    first_prompt = prompt_ids[prompts[0][0]]
    for name, _ in prompts:
        generator.generate(prompt_ids[name])
    entries = []

    def measure(label, run_one, warm_up=None):
        if warm_up is not None:
            warm_up()
        runs = []
        for name, _ in prompts:
            try:
                text, tokens, seconds = run_one(name)
            except CompileError as error:
                runs.append({"prompt": name, "tokens": 0, "seconds": 0.0, "valid": False,
                             "error": f"compile error: {str(error)[:200]}"})
                continue
            runs.append({"prompt": name, "tokens": tokens, "seconds": round(seconds, 4),
                         "valid": _validity(text, schemas[name]), "text": text})
        entry = _record(label, runs)
        entries.append(entry)
        log(f"[e2e] {label:24} {entry['tokens_per_s']:8.1f} tok/s  {entry['tokens']:4} tokens"
            f"  valid {entry['valid_outputs']}/{len(runs)}")

    measure("unconstrained", lambda name: generator.generate(prompt_ids[name]))

    for engine_name in engine_names:
        if engine_name in SURECALL_NAMES:  # surecall's own rows follow
            continue
        engine = ENGINES[engine_name](tokenizer, local_model.logits_size)

        def run_peer(name, engine=engine):
            session = engine.compile(json.dumps(schemas[name]))
            return generator.generate(prompt_ids[name], processor_class(session, len(prompt_ids[name])))

        def warm_up_peer(engine=engine):
            try:
                session = engine.compile(json.dumps(WARM_UP_SCHEMA))
            except CompileError:
                return  # the timed runs then carry the start-up cost, as they did before
            generator.generate(first_prompt, processor_class(session, len(first_prompt)))

        measure(engine_name, run_peer, warm_up_peer)

    if "surecall" in engine_names and surecall_available():
        from surecall import grammar_from_schema
        from surecall.engine import Matcher

        grammars = {name: grammar_from_schema(schemas[name]) for name, _ in prompts}
        for grammar in grammars.values():
            Matcher(grammar, local_model.vocabulary)  # compiles the automaton before the clock starts
        warm_up_grammar = grammar_from_schema(WARM_UP_SCHEMA)
        try:
            from surecall.adapters.transformers.logits_processor import SurecallLogitsProcessor

            measure("surecall (processor)", lambda name: generator.generate(
                prompt_ids[name], SurecallLogitsProcessor(grammars[name], local_model.vocabulary)),
                lambda: generator.generate(first_prompt, SurecallLogitsProcessor(warm_up_grammar, local_model.vocabulary)))
        except ImportError as error:
            log(f"[e2e] surecall processor unavailable: {error}")
        try:
            measure("unconstrained (decode)", lambda name: generator.decode(prompt_ids[name], None),
                    lambda: [generator.decode(prompt_ids[name], None) for name, _ in prompts])
            measure("surecall (decode)", lambda name: generator.decode(prompt_ids[name], grammars[name]),
                    lambda: generator.decode(first_prompt, warm_up_grammar))
        except ImportError as error:
            log(f"[e2e] surecall decode loop unavailable: {error}")

    return {
        "model": local_model.name,
        "device": str(local_model.device),
        "max_tokens": max_tokens,
        "model_load_s": round(load_s, 2),
        "entries": entries,
    }


def _main() -> None:
    import argparse

    from bench.peers import ENGINES

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available)")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--engines", default=",".join(ENGINES))
    parser.add_argument("--out", default=None, help="write the results JSON here")
    args = parser.parse_args()
    results = run_e2e(args.engines.split(","), max_tokens=args.max_tokens, device=args.device)
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


if __name__ == "__main__":
    _main()
