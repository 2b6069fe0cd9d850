"""The illustrative example of "Grammar-Aligned Decoding" (Park et al., 2024), exactly.

Grammar (the paper's Fig. 1): the string ``00000`` and every length-5 string that
starts with ``1``. Language model: an exact synthetic model over the tokens
{"0", "1", EOS} that prefers strings ending in ``1`` (it stops often after a ``1``
and almost never after a ``0``); no neural network, so the target distribution
Q(w) = 1[w in L] P(w) / Z is computed exactly by enumerating the 17 sentences.

Plain constrained decoding picks the first token 50/50 and, after ``0``, is trapped
in ``00000``; ASAp (``surecall.engine.AlignedSampler``) learns the expected future
grammaticality from its samples and converges to the target. Measured over 2,000
iterations: the KL divergence to the target (exact, from each sampler's current
next-token distributions, and the paper's empirical estimate over a sliding window
of 500 samples) and the expectation of "ends with 1".

Run: ``python -m bench.asap_example`` (writes ``bench/results/asap.json`` and ``.png``).
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from surecall.engine import AlignedSampler

RESULTS_DIR = Path(__file__).resolve().parent / "results"

ZERO, ONE, EOS = 0, 1, 2
TOKEN_TEXT = {ZERO: "0", ONE: "1"}
# Fig. 1 of the paper, in surecall's EBNF dialect.
PAPER_GRAMMAR = """
start ::= "00000" | "1" a2 ;
a2 ::= "0" a3 | "1" a3 ;
a3 ::= "0" a4 | "1" a4 ;
a4 ::= "0" a5 | "1" a5 ;
a5 ::= "0" | "1" ;
"""
# The synthetic model: the probability of stopping depends on the last character.
STOP_AFTER_ONE = 0.3
STOP_AFTER_ZERO = 1e-3
WINDOW = 500


def binary_string_model(prefix: Sequence[int]) -> np.ndarray:
    """Next-token log-probabilities over (0, 1, EOS) of a model asked for "a binary
    string that ends with a 1": never empty, stops mostly right after a ``1``."""
    if not prefix:
        stop = 0.0
    else:
        stop = STOP_AFTER_ONE if prefix[-1] == ONE else STOP_AFTER_ZERO
    with np.errstate(divide="ignore"):
        return np.log(np.array([(1.0 - stop) / 2.0, (1.0 - stop) / 2.0, stop]))


def paper_matcher(max_tokens=None):
    """A surecall ``Matcher`` for the paper's grammar over the vocabulary {"0", "1", EOS}."""
    from surecall.engine import Grammar, Matcher, TokenVocabulary

    vocab = TokenVocabulary([b"0", b"1", b"</s>"], special_ids=[EOS], eos_token_ids=[EOS])
    return Matcher(Grammar.from_ebnf(PAPER_GRAMMAR), vocab, max_tokens=max_tokens)


def text_of(tokens: Sequence[int]) -> str:
    return "".join(TOKEN_TEXT[t] for t in tokens)


StepDistribution = Callable[[tuple, np.ndarray, np.ndarray], np.ndarray]


def sentence_distribution(matcher, model, step: StepDistribution) -> dict[str, float]:
    """Probability of every sentence when each next token is drawn from
    ``step(prefix, model_logprobs, allowed_ids)`` (one probability per allowed id).
    Enumerates the finite language depth first through clones of ``matcher``."""
    result: dict[str, float] = {}
    stack = [((), matcher.clone(), 1.0)]
    while stack:
        prefix, state, mass = stack.pop()
        # a matcher finishes by itself when nothing may follow; the end is still a token of P
        allowed = np.array([EOS]) if state.is_finished() else np.asarray(state.allowed_token_ids(), dtype=np.int64)
        probabilities = step(prefix, model(prefix), allowed)
        for token, probability in zip(allowed.tolist(), probabilities.tolist()):
            if probability <= 0.0:
                continue
            if token == EOS:
                result[text_of(prefix)] = result.get(text_of(prefix), 0.0) + mass * probability
                continue
            child = state.clone()
            child.advance(token)
            stack.append((prefix + (token,), child, mass * probability))
    return result


def _softmax(values: np.ndarray) -> np.ndarray:
    shifted = np.exp(values - np.max(values))
    return shifted / shifted.sum()


def target_distribution(matcher, model=binary_string_model) -> dict[str, float]:
    """Q(w) proportional to P(w) on the sentences of the grammar."""
    unnormalised = sentence_distribution(matcher, model, lambda _p, lp, allowed: np.exp(lp[allowed]))
    total = sum(unnormalised.values())
    return {text: mass / total for text, mass in unnormalised.items()}


def constrained_distribution(matcher, model=binary_string_model) -> dict[str, float]:
    """The distribution plain grammar-constrained decoding samples from."""
    return sentence_distribution(matcher, model, lambda _p, lp, allowed: _softmax(lp[allowed]))


def aligned_distribution(sampler: AlignedSampler, matcher, model=binary_string_model) -> dict[str, float]:
    """The distribution the ASAp sampler would draw its next sample from."""
    return sentence_distribution(matcher, model, sampler.next_token_distribution)


def constrained_sample(matcher, model, rng: np.random.Generator, eos_token_ids=(EOS,)) -> tuple[int, ...]:
    """One sample of plain constrained decoding: the model restricted to the mask."""
    state = matcher.clone()
    tokens: list[int] = []
    while not state.is_finished():
        allowed = np.asarray(state.allowed_token_ids(), dtype=np.int64)
        token = int(rng.choice(allowed, p=_softmax(model(tuple(tokens))[allowed])))
        state.advance(token)
        if token in eos_token_ids:
            break
        tokens.append(token)
    return tuple(tokens)


def kl_divergence(p: dict[str, float], q: dict[str, float]) -> float:
    """KL(p || q) in nats (p's support must lie inside q's)."""
    return sum(mass * math.log(mass / q[text]) for text, mass in p.items() if mass > 0.0)


def ends_with_one(distribution: dict[str, float]) -> float:
    return sum(mass for text, mass in distribution.items() if text.endswith("1"))


def empirical(texts: Sequence[str]) -> dict[str, float]:
    counts: dict[str, int] = {}
    for text in texts:
        counts[text] = counts.get(text, 0) + 1
    return {text: count / len(texts) for text, count in counts.items()}


def run(matcher, *, iterations: int = 2000, seed: int = 0, model=binary_string_model, exact_every: int = 1) -> dict:
    """Draw ``iterations`` samples with constrained decoding and with ASAp.

    Returns the exact target, the samples of both methods and, for ASAp, the exact
    KL divergence of its sampling distribution to the target before each draw
    (every ``exact_every`` iterations)."""
    target = target_distribution(matcher, model)
    constrained = constrained_distribution(matcher, model)
    rng = np.random.default_rng(seed)
    sampler = AlignedSampler(matcher, seed=seed + 1, eos_token_ids=[EOS])
    constrained_texts, aligned_texts = [], []
    aligned_kl, aligned_expectation, checkpoints = [], [], []
    started = time.perf_counter()
    for iteration in range(iterations):
        if iteration % exact_every == 0:
            current = aligned_distribution(sampler, matcher, model)
            checkpoints.append(iteration)
            aligned_kl.append(kl_divergence(current, target))
            aligned_expectation.append(ends_with_one(current))
        draw = sampler.sample(model)
        if not draw.complete:
            raise AssertionError(f"ASAp produced an incomplete sample {draw.token_ids}")
        aligned_texts.append(text_of(draw.token_ids))
        constrained_texts.append(text_of(constrained_sample(matcher, model, rng)))
    elapsed = time.perf_counter() - started
    return {
        "iterations": iterations,
        "seed": seed,
        "target": target,
        "constrained_distribution": constrained,
        "target_ends_with_1": ends_with_one(target),
        "constrained_exact_ends_with_1": ends_with_one(constrained),
        "constrained_exact_kl": kl_divergence(constrained, target),
        "aligned_checkpoints": checkpoints,
        "aligned_exact_kl": aligned_kl,
        "aligned_exact_ends_with_1": aligned_expectation,
        "aligned_samples": aligned_texts,
        "constrained_samples": constrained_texts,
        "aligned_trie_nodes": sampler.node_count,
        "seconds": elapsed,
    }


def window_kl(samples: Sequence[str], target: dict[str, float], window: int = WINDOW) -> list[float]:
    """The paper's measure: KL of the empirical distribution of samples i..i+window."""
    return [kl_divergence(empirical(samples[i : i + window]), target) for i in range(0, len(samples) - window + 1)]


def running_mean(flags: Sequence[bool]) -> list[float]:
    return (np.cumsum(np.asarray(flags, dtype=float)) / np.arange(1, len(flags) + 1)).tolist()


def summarise(result: dict) -> dict:
    aligned, constrained = result["aligned_samples"], result["constrained_samples"]
    target = result["target"]
    last = slice(-WINDOW, None)
    return {
        "iterations": result["iterations"],
        "seed": result["seed"],
        "target_ends_with_1": result["target_ends_with_1"],
        "constrained": {
            "exact_kl": result["constrained_exact_kl"],
            "exact_ends_with_1": result["constrained_exact_ends_with_1"],
            "empirical_ends_with_1": float(np.mean([t.endswith("1") for t in constrained])),
            "window_kl_last_500": kl_divergence(empirical(constrained[last]), target),
        },
        "aligned": {
            "exact_kl_first": result["aligned_exact_kl"][0],
            "exact_kl_after": {
                str(n): result["aligned_exact_kl"][result["aligned_checkpoints"].index(n)]
                for n in (10, 50, 100, 500, 1000, result["iterations"] - 1)
                if n in result["aligned_checkpoints"]
            },
            "exact_ends_with_1_final": result["aligned_exact_ends_with_1"][-1],
            "empirical_ends_with_1": float(np.mean([t.endswith("1") for t in aligned])),
            "empirical_ends_with_1_last_500": float(np.mean([t.endswith("1") for t in aligned[last]])),
            "window_kl_last_500": kl_divergence(empirical(aligned[last]), target),
            "trie_nodes": result["aligned_trie_nodes"],
        },
        "share_00000": {
            "target": target.get("00000", 0.0),
            "constrained": float(np.mean([t == "00000" for t in constrained])),
            "aligned": float(np.mean([t == "00000" for t in aligned])),
        },
        "seconds": result["seconds"],
    }


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    target = result["target"]
    figure, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    left.plot(result["aligned_checkpoints"], result["aligned_exact_kl"], color="tab:blue", label="ASAp (exact)")
    left.axhline(result["constrained_exact_kl"], color="tab:red", label="constrained decoding (exact)")
    for name, color in (("aligned_samples", "tab:blue"), ("constrained_samples", "tab:red")):
        left.plot(window_kl(result[name], target), color=color, linestyle=":", label=f"{'ASAp' if name.startswith('aligned') else 'constrained'} (window of {WINDOW})")
    left.set_yscale("symlog", linthresh=1e-3)
    left.set_xlabel("iteration")
    left.set_ylabel("KL(sampler || target) [nats]")
    left.set_title("KL divergence to the grammar-conditioned model")
    left.legend(fontsize=8)

    right.plot(running_mean([t.endswith("1") for t in result["aligned_samples"]]), color="tab:blue", label="ASAp (running mean)")
    right.plot(running_mean([t.endswith("1") for t in result["constrained_samples"]]), color="tab:red", label="constrained decoding (running mean)")
    right.axhline(result["target_ends_with_1"], color="black", linestyle="--", label="target")
    right.set_ylim(0.0, 1.05)
    right.set_xlabel("iteration")
    right.set_ylabel('share of samples ending with "1"')
    right.set_title('Expectation of "ends with 1"')
    right.legend(fontsize=8, loc="lower right")
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    result = run(paper_matcher(), iterations=args.iterations, seed=args.seed)
    summary = summarise(result)
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    (RESULTS_DIR / "asap.json").write_text(json.dumps({"summary": summary, "target": result["target"], "constrained_distribution": result["constrained_distribution"]}, indent=2))
    plot(result, RESULTS_DIR / "asap.png")
    print(json.dumps(summary, indent=2))
    return summary


if __name__ == "__main__":
    main()
