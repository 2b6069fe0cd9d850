"""AlignedSampler (ASAp): soundness of the EFG bounds, convergence on the paper's
example, the trie's memory bound and input validation.

Every run uses a fixed seed, so the statistical bounds below are checked against one
deterministic sequence of draws; they are loose (several times the sampling noise)
so that a correct implementation never fails them and a biased one always does.
"""

from __future__ import annotations

import importlib.util
import itertools
import math
import warnings
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from surecall.engine import AlignedSampler

_BENCH = Path(__file__).resolve().parent.parent / "bench" / "asap_example.py"
_spec = importlib.util.spec_from_file_location("asap_example_under_test", _BENCH)
asap = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(asap)

ZERO, ONE, EOS = asap.ZERO, asap.ONE, asap.EOS
PAPER_LANGUAGE = frozenset({"00000"} | {"1" + "".join(bits) for bits in itertools.product("01", repeat=4)})


class FiniteLanguageMatcher:
    """Test double of the matcher protocol for a finite language over {"0", "1"}:
    allows a digit iff some sentence continues with it, EOS iff the text is a sentence.
    With ``finish_when_maximal`` it finishes by itself after a sentence nothing may
    follow, as ``surecall.engine.Matcher`` does."""

    def __init__(self, sentences, text="", finished=False, finish_when_maximal=False):
        self.sentences = frozenset(sentences)
        self.text = text
        self.finished = finished
        self.finish_when_maximal = finish_when_maximal

    def clone(self):
        return FiniteLanguageMatcher(self.sentences, self.text, self.finished, self.finish_when_maximal)

    def _digits(self):
        return [t for t in (ZERO, ONE) if any(s.startswith(self.text + asap.TOKEN_TEXT[t]) for s in self.sentences)]

    def allowed_token_ids(self):
        if self.finished:
            return np.array([], dtype=np.int32)
        allowed = self._digits()
        if self.text in self.sentences:
            allowed.append(EOS)
        return np.array(allowed, dtype=np.int32)

    def advance(self, token):
        if token not in self.allowed_token_ids().tolist():
            return "REJECTED"
        if token == EOS:
            self.finished = True
            return "FINISHED"
        self.text += asap.TOKEN_TEXT[token]
        if self.finish_when_maximal and not self._digits():
            self.finished = True
            return "FINISHED"
        return "ACCEPTED"

    def is_finished(self):
        return self.finished


def _paper_matcher():
    return asap.paper_matcher()


def test_the_paper_grammar_accepts_exactly_00000_and_length_5_strings_starting_with_1():
    from surecall.engine import Grammar

    grammar = Grammar.from_ebnf(asap.PAPER_GRAMMAR)
    for length in range(8):
        for bits in itertools.product("01", repeat=length):
            text = "".join(bits)
            assert grammar.accepts(text) == (text in PAPER_LANGUAGE), text


def _tokens(text):
    return tuple(ZERO if c == "0" else ONE for c in text)


def exact_efg(prefix_text, sentences, model=asap.binary_string_model):
    """c(prefix): probability that the unconstrained model continues the prefix into a sentence."""
    total = 0.0
    for sentence in sentences:
        if not sentence.startswith(prefix_text):
            continue
        tokens = _tokens(sentence) + (EOS,)
        logprob = sum(model(tokens[:i])[tokens[i]] for i in range(len(prefix_text), len(tokens)))
        total += math.exp(logprob)
    return total


def _all_prefixes(sentences):
    return sorted({s[:i] for s in sentences for i in range(len(s) + 1)})


@pytest.fixture(scope="module")
def paper_run():
    return asap.run(_paper_matcher(), iterations=400, seed=7, exact_every=10)


def test_target_prefers_strings_ending_in_one_while_constrained_decoding_does_not(paper_run):
    assert paper_run["target_ends_with_1"] > 0.95
    assert set(paper_run["target"]) == PAPER_LANGUAGE
    assert abs(sum(paper_run["target"].values()) - 1.0) < 1e-12
    # constrained decoding picks the first digit 50/50 and is then trapped in 00000
    assert paper_run["constrained_distribution"]["00000"] == pytest.approx(0.5)
    assert paper_run["constrained_exact_ends_with_1"] < 0.55


def test_asap_converges_to_the_target_and_constrained_decoding_stays_biased(paper_run):
    kl = paper_run["aligned_exact_kl"]
    assert kl[0] == pytest.approx(paper_run["constrained_exact_kl"])  # before any sample ASAp is GCD
    assert kl[-1] < 0.02 < 0.5 < paper_run["constrained_exact_kl"]
    assert paper_run["aligned_exact_ends_with_1"][-1] > paper_run["target_ends_with_1"] - 0.02
    aligned_tail = paper_run["aligned_samples"][-200:]
    constrained_tail = paper_run["constrained_samples"][-200:]
    # 200 Bernoulli draws: standard error at most 0.035, bounds are more than 4 of them away
    assert np.mean([t.endswith("1") for t in aligned_tail]) > paper_run["target_ends_with_1"] - 0.1
    assert np.mean([t.endswith("1") for t in constrained_tail]) < 0.7
    assert all(text in PAPER_LANGUAGE for text in paper_run["aligned_samples"] + paper_run["constrained_samples"])


def test_one_sample_of_00000_makes_the_efg_of_its_prefixes_exact():
    sampler = AlignedSampler(_paper_matcher(), seed=0, eos_token_ids=[EOS])
    while True:
        draw = sampler.sample(asap.binary_string_model)
        if draw.token_ids == _tokens("00000"):
            break
    for i in range(1, 6):
        prefix = "00000"[:i]
        assert sampler.efg(_tokens(prefix)) == pytest.approx(exact_efg(prefix, PAPER_LANGUAGE), rel=1e-9)


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), samples=st.integers(1, 40), finish_when_maximal=st.booleans())
def test_efg_is_always_an_over_approximation_and_only_tightens(seed, samples, finish_when_maximal):
    matcher = FiniteLanguageMatcher(PAPER_LANGUAGE, finish_when_maximal=finish_when_maximal)
    sampler = AlignedSampler(matcher, seed=seed, eos_token_ids=[EOS])
    prefixes = [p for p in _all_prefixes(PAPER_LANGUAGE) if p]
    previous = {p: 1.0 for p in prefixes}
    for _ in range(samples):
        draw = sampler.sample(asap.binary_string_model)
        assert draw.complete and "".join(asap.TOKEN_TEXT[t] for t in draw.token_ids) in PAPER_LANGUAGE
        for prefix in prefixes:
            bound = sampler.efg(_tokens(prefix))
            assert bound >= exact_efg(prefix, PAPER_LANGUAGE) * (1 - 1e-9)
            assert bound <= previous[prefix] + 1e-15
            previous[prefix] = bound


def test_sample_reports_model_and_proposal_log_probabilities():
    sampler = AlignedSampler(FiniteLanguageMatcher(PAPER_LANGUAGE), seed=3, eos_token_ids=[EOS])
    draw = sampler.sample(asap.binary_string_model)
    tokens = draw.token_ids + (EOS,)
    expected = sum(asap.binary_string_model(tokens[:i])[tokens[i]] for i in range(len(tokens)))
    assert draw.model_logprob == pytest.approx(expected)
    # the first draw is plain constrained decoding: renormalise over the mask at each step
    matcher = FiniteLanguageMatcher(PAPER_LANGUAGE)
    proposal = 0.0
    for i, token in enumerate(tokens):
        allowed = matcher.allowed_token_ids()
        logprobs = asap.binary_string_model(tokens[:i])
        proposal += logprobs[token] - math.log(np.exp(logprobs[allowed]).sum())
        matcher.advance(token)
    assert draw.proposal_logprob == pytest.approx(proposal)


BINARY_UP_TO_8 = frozenset("".join(b) for n in range(1, 9) for b in itertools.product("01", repeat=n))


def test_trie_never_exceeds_max_nodes_between_samples_and_stays_sound():
    max_nodes = 24
    sampler = AlignedSampler(FiniteLanguageMatcher(BINARY_UP_TO_8), max_nodes=max_nodes, seed=5, eos_token_ids=[EOS])
    prefixes = [p for p in _all_prefixes(BINARY_UP_TO_8) if p and len(p) <= 3]
    exact = {p: exact_efg(p, BINARY_UP_TO_8) for p in prefixes}
    for _ in range(300):
        draw = sampler.sample(asap.binary_string_model)
        assert draw.complete and 1 <= len(draw.token_ids) <= 8
        assert sampler.node_count <= max_nodes
        for prefix in prefixes:
            assert sampler.efg(_tokens(prefix)) >= exact[prefix] * (1 - 1e-9)
    assert sampler.evictions > 0


def test_unbounded_trie_grows_with_distinct_prefixes_only():
    sampler = AlignedSampler(FiniteLanguageMatcher(BINARY_UP_TO_8), seed=5, eos_token_ids=[EOS])
    draws = sampler.sample_many(asap.binary_string_model, 300)
    # one node per distinct non-empty sampled prefix, plus the root
    distinct = {draw.token_ids[:i] for draw in draws for i in range(1, len(draw.token_ids) + 1)}
    assert sampler.node_count == 1 + len(distinct)
    assert sampler.evictions == 0


def test_max_steps_returns_an_incomplete_sample():
    sampler = AlignedSampler(FiniteLanguageMatcher(PAPER_LANGUAGE), seed=0, eos_token_ids=[EOS])
    draw = sampler.sample(asap.binary_string_model, max_steps=2)
    assert not draw.complete and len(draw.token_ids) == 2


def test_bad_inputs_raise_clear_errors():
    with pytest.raises(TypeError, match="needs a matcher with a clone"):
        AlignedSampler(object())
    with pytest.raises(ValueError, match="max_nodes"):
        AlignedSampler(FiniteLanguageMatcher(PAPER_LANGUAGE), max_nodes=0)
    sampler = AlignedSampler(FiniteLanguageMatcher(PAPER_LANGUAGE), eos_token_ids=[EOS])
    with pytest.raises(ValueError, match="1-D"):
        sampler.sample(lambda prefix: np.zeros((2, 3)))
    with pytest.raises(ValueError, match="only 2"):
        sampler.sample(lambda prefix: np.zeros(2))
    with pytest.raises(ValueError, match="finite"):
        sampler.sample(lambda prefix: np.full(3, -np.inf))
    with pytest.raises(ValueError, match="n must be"):
        sampler.sample_many(asap.binary_string_model, -1)


# -- on the embedded model ------------------------------------------------------------


@pytest.fixture(scope="module")
def embedded_model():
    from surecall.adapters.transformers.loading import load_model

    return load_model()


@pytest.mark.model
def test_cached_next_token_logprobs_equal_a_fresh_forward_pass(embedded_model):
    import torch

    from surecall.sampling import ModelNextTokenLogprobs

    prompt = embedded_model.tokenizer.encode("The capital of France is")
    next_token_logprobs = ModelNextTokenLogprobs(embedded_model, prompt, temperature=0.7)
    a, b, c = embedded_model.tokenizer.encode(" Paris, of course")[:3]
    # extend, extend, branch (cache cropped), restart, repeat
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for generated in [(), (a,), (a, b), (a, c), (), (a, b), (a, b)]:
            cached = next_token_logprobs(generated)
            with torch.inference_mode():
                logits = embedded_model.model(input_ids=torch.tensor([prompt + list(generated)])).logits[0, -1]
            fresh = torch.log_softmax(logits.double() / 0.7, dim=-1).numpy()
            np.testing.assert_allclose(cached, fresh, atol=2e-3)
    # the repeated prefix was answered without a forward pass
    assert next_token_logprobs.forward_passes == 6
    # the cache went in under the name the model's forward takes (no deprecation of the old one)
    assert not [w for w in caught if "past_key_values" in str(w.message)]


@pytest.mark.model
def test_sample_aligned_returns_n_valid_outputs_with_their_weights(embedded_model):
    import surecall
    from surecall.output_types import Regex

    choices = {"yes", "no", "maybe"}
    outputs = surecall.sample_aligned(
        embedded_model,
        [{"role": "user", "content": "Is the sky blue? Answer yes, no or maybe."}],
        Regex("yes|no|maybe"),
        n=6,
        seed=0,
        max_tokens=4,
        return_details=True,
    )
    assert len(outputs) == 6
    for output in outputs:
        assert output.value in choices and output.text == output.value
        assert output.model_logprob <= 0.0 and output.proposal_logprob <= 0.0
        assert output.importance_weight > 0.0
    values = surecall.sample_aligned(
        embedded_model, "Pick a colour: ", {"type": "object", "properties": {"colour": {"enum": ["red", "green"]}},
                                            "required": ["colour"]}, n=3, seed=1, max_tokens=12,
    )
    assert len(values) == 3 and all(v["colour"] in ("red", "green") for v in values)


def test_sample_aligned_rejects_bad_arguments():
    import surecall

    with pytest.raises(ValueError, match="n must be"):
        surecall.sample_aligned(None, "x", surecall.Regex("a"), n=0)
    with pytest.raises(ValueError, match="structured output type"):
        surecall.sample_aligned(None, "x", None, n=2)
