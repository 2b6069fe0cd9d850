"""Grammar-aligned sampling on a local model: ``sample_aligned``.

``generate`` with a temperature samples each token from the model restricted to the
grammar's mask. That is always valid but biased: outputs are not drawn in proportion
to the model's own probabilities among the valid outputs. ``sample_aligned`` draws n
outputs with ``surecall.engine.AlignedSampler`` (ASAp), whose samples converge to the
model's distribution conditioned on the grammar as more of them are drawn. Each draw
costs one forward pass per token (the KV cache of the previous draw is reused for
the shared prefix), so it suits small n and short outputs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Sequence

import numpy as np

from surecall.output_types import OutputSpec

__all__ = ["sample_aligned", "AlignedOutput", "ModelNextTokenLogprobs"]


@dataclass(frozen=True)
class AlignedOutput:
    """One output of ``sample_aligned(..., return_details=True)``.

    ``importance_weight`` is P(w) / Q~(w), the model's probability of the output over
    the probability the sampler gave it; normalised over the n outputs it corrects
    what bias the sampler still has (self-normalised importance sampling).
    """

    value: Any
    text: str
    token_ids: tuple[int, ...]
    model_logprob: float
    proposal_logprob: float

    @property
    def importance_weight(self) -> float:
        return float(np.exp(self.model_logprob - self.proposal_logprob))


class ModelNextTokenLogprobs:
    """Next-token log-probabilities of a transformers causal LM after a fixed prompt.

    Called with the generated token ids, returns a float64 numpy array over the
    model's logits rows. Successive calls that share a prefix reuse the KV cache: a
    sampler walks root to leaf, so each call usually feeds one token, and a new
    sample crops the cache back to the longest prefix it shares with the last one.
    """

    def __init__(self, local_model, prompt_ids: Sequence[int], *, temperature: float = 1.0):
        if not temperature > 0.0:
            raise ValueError(f"grammar-aligned sampling needs a temperature > 0, got {temperature!r}")
        if len(prompt_ids) == 0:
            raise ValueError("the prompt is empty: at least one prompt token is needed")
        self._local_model = local_model
        self._prompt = [int(t) for t in prompt_ids]
        self._temperature = float(temperature)
        self._cache = None
        self._fed: list[int] = []
        self._last_logits = None
        self.forward_passes = 0

    def __call__(self, generated: Sequence[int]) -> np.ndarray:
        import torch

        wanted = self._prompt + [int(t) for t in generated]
        shared = 0
        limit = min(len(wanted), len(self._fed))
        while shared < limit and wanted[shared] == self._fed[shared]:
            shared += 1
        if shared == len(wanted) == len(self._fed) and self._last_logits is not None:
            return self._last_logits
        # At least one token must be fed to get logits for the last position.
        shared = min(shared, len(wanted) - 1)
        if self._cache is None or shared == 0:
            from transformers import DynamicCache

            self._cache = DynamicCache()
            shared = 0
        elif shared < len(self._fed):
            # a negative count removes that many positions, in old and new transformers alike
            self._cache.crop(shared - len(self._fed))
        model = self._local_model.model
        device = self._local_model.device
        new_tokens = torch.tensor([wanted[shared:]], dtype=torch.long, device=device)
        positions = torch.arange(shared, len(wanted), device=device).unsqueeze(0)
        with self._local_model.lock, torch.inference_mode():
            output = model(
                input_ids=new_tokens,
                position_ids=positions,
                use_cache=True,
                **{self._local_model.cache_argument: self._cache},
            )
            logits = output.logits[0, -1].to(torch.float64) / self._temperature
            logprobs = torch.log_softmax(logits, dim=-1).cpu().numpy()
        self.forward_passes += 1
        self._fed = wanted
        self._last_logits = logprobs
        return logprobs


def sample_aligned(
    model: Any,
    prompt: Any,
    output_type: Any,
    n: int = 8,
    *,
    max_tokens: int = 256,
    temperature: float = 1.0,
    seed: Optional[int] = None,
    max_nodes: Optional[int] = None,
    return_details: bool = False,
) -> list[Any]:
    """Draw ``n`` outputs of ``output_type`` with grammar-aligned sampling (ASAp).

    ``model`` and ``prompt`` are as for ``surecall.generate``. Every output is valid
    and fits in ``max_tokens`` (budget-aware masking); the draws are successive, and
    later ones follow the model's distribution conditioned on the grammar more
    closely than plain constrained sampling does. Returns the parsed values, or
    ``AlignedOutput`` records with ``return_details=True``.
    """
    from surecall.engine import AlignedSampler, Matcher
    from surecall.engine.aligned import DEFAULT_MAX_NODES
    from surecall.generation import render_prompt, resolve_model

    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ValueError(f"n must be a positive integer, got {n!r}")
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
        raise ValueError(f"max_tokens must be a positive integer, got {max_tokens!r}")
    spec = OutputSpec.of(output_type)
    if spec.grammar is None:
        raise ValueError("sample_aligned needs a structured output type (a schema, Pydantic model, Regex or Grammar)")
    local_model = resolve_model(model)
    vocab = local_model.vocabulary
    next_token_logprobs = ModelNextTokenLogprobs(
        local_model, render_prompt(local_model.tokenizer, prompt), temperature=temperature
    )
    sampler = AlignedSampler(
        Matcher(spec.grammar, vocab, max_tokens=max_tokens),
        max_nodes=DEFAULT_MAX_NODES if max_nodes is None else max_nodes,
        seed=seed,
        eos_token_ids=sorted(vocab.eos_token_ids),
    )
    outputs = []
    for _ in range(n):
        draw = sampler.sample(next_token_logprobs)
        text = b"".join(vocab.token_bytes(t) for t in draw.token_ids).decode("utf-8", errors="replace")
        value = spec.parse(text)
        outputs.append(
            AlignedOutput(value, text, draw.token_ids, draw.model_logprob, draw.proposal_logprob)
            if return_details
            else value
        )
    return outputs
