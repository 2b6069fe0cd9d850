"""Grammar-aligned sampling: adaptive sampling with approximate expected futures (ASAp).

Plain grammar-constrained decoding samples the next token from the model's
distribution restricted to the tokens the grammar still allows. That keeps every
output valid but distorts the distribution: a prefix that is grammatical yet almost
never leads to a grammatical string the model likes is picked as often as the model
picks its first token, and the sampler is then trapped in that corner of the
language. The distribution one wants is the model's, conditioned on the grammar:

    Q(w) = 1[w in L(G)] * P(w) / sum_w' 1[w' in L(G)] * P(w')

Sampling it left to right needs, for every prefix, its *expected future
grammaticality* (EFG) c(prefix): the probability that the model, continuing
unconstrained from that prefix, produces a sentence of the grammar. ASAp keeps an
over-approximation ``c~`` of it in a trie of the prefixes sampled so far:

* a prefix never visited gets the grammar's prefix check: 1 if some sentence
  starts with it (the only prefixes the matcher allows), 0 otherwise;
* a visited prefix gets ``c~(p) = sum_t P(t | p) * c~(p t)``, which equals the mass
  the model puts on allowed tokens minus the mass lost below the children sampled
  so far; every sample tightens the bound along its path.

The next token is drawn from ``P(t | p) * c~(p t)`` (normalised). ``c~ >= c``
always holds, and repeated sampling drives ``c~`` to ``c``, so the samples converge
to the model's distribution conditioned on the grammar instead of staying biased.

Memory. The trie holds at most ``max_nodes`` nodes between samples (a sample in
progress may add one node per generated token on top). When it grows past the
limit, the least recently used subtrees are collapsed: a collapsed node forgets
its children but keeps its current EFG as a frozen upper bound, so every value in
the trie remains an over-approximation (sampling stays correct, convergence in that
cold region simply restarts from the frozen value). A node costs about 500 bytes
(a ``__slots__`` object, its float fields, its child dict and its entry in the
parent's; measured in ``bench/overhead.py``), so the default of 100,000 nodes stays
around 50 MB.

The sampler works with any model callable that maps the generated token ids
(without the prompt) to next-token log-probabilities, a 1-D numpy array with one
entry per token id; unnormalised logits are accepted and normalised. One sampler
belongs to one (model, prompt, grammar, temperature): the EFG values it learns are
properties of that distribution.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Optional, Protocol, Sequence

import numpy as np

NextTokenLogprobs = Callable[[Sequence[int]], np.ndarray]

DEFAULT_MAX_NODES = 100_000
# After an eviction the trie shrinks to this share of ``max_nodes``, so that the
# O(size) eviction pass runs rarely instead of after every sample.
_EVICTION_LOW_WATER = 0.75


class PrefixConstraint(Protocol):
    """What the sampler needs from a matcher (``surecall.engine.Matcher`` provides it)."""

    def clone(self) -> "PrefixConstraint": ...

    def allowed_token_ids(self) -> np.ndarray: ...

    def advance(self, token_id: int) -> object: ...

    def is_finished(self) -> bool: ...


@dataclass(frozen=True)
class AlignedSample:
    """One draw of :meth:`AlignedSampler.sample`.

    ``token_ids`` are the generated tokens without the final end-of-sequence token;
    ``complete`` says whether the matcher finished (the output is a sentence of the
    grammar). ``model_logprob`` is log P(w) under the unconstrained model and
    ``proposal_logprob`` the log-probability the sampler gave this draw, both
    including the end-of-sequence token when one was emitted; their difference is
    the importance weight of the sample with respect to the target distribution.
    """

    token_ids: tuple[int, ...]
    complete: bool
    model_logprob: float
    proposal_logprob: float


class _Node:
    """A sampled prefix.

    ``edge_prob`` is P(token | parent prefix). ``allowed_mass`` (None until the model
    has been queried at this prefix) is the model's mass on the tokens the grammar
    allows here; ``lost`` is the mass known to end ungrammatically below the
    children, ``sum_child edge_prob * (1 - child EFG)``; ``bound`` is an upper bound
    on the EFG that survives the collapse of this node's subtree.
    """

    __slots__ = ("children", "edge_prob", "allowed_mass", "lost", "bound", "efg", "last_used")

    def __init__(self, edge_prob: float, stamp: int):
        self.children: Optional[dict[int, _Node]] = None
        self.edge_prob = edge_prob
        self.allowed_mass: Optional[float] = None
        self.lost = 0.0
        self.bound = 1.0
        self.efg = 1.0
        self.last_used = stamp

    def recompute(self) -> float:
        if self.allowed_mass is not None:
            self.efg = min(self.bound, max(0.0, self.allowed_mass - self.lost))
        return self.efg


def _log_softmax(values: np.ndarray) -> np.ndarray:
    values = np.asarray(values, dtype=np.float64)
    top = np.max(values)
    if not np.isfinite(top):
        raise ValueError("the model returned no finite log-probability for the next token")
    shifted = values - top
    return shifted - math.log(float(np.sum(np.exp(shifted))))


class AlignedSampler:
    """Draws grammar-constrained samples that converge to the model's distribution
    conditioned on the grammar (ASAp, Park et al. 2024).

    ``matcher`` is a matcher at the start of the output (``Matcher(grammar, vocab,
    max_tokens=...)``); it is cloned for every sample and never advanced itself.
    ``eos_token_ids`` (default: the matcher vocabulary's) are left out of the
    returned token ids.
    Samples drawn one after another share what they learned: the more samples, the
    closer each new one is to the target distribution.
    """

    def __init__(
        self,
        matcher: PrefixConstraint,
        *,
        max_nodes: int = DEFAULT_MAX_NODES,
        seed: Optional[int] = None,
        eos_token_ids: Optional[Sequence[int]] = None,
    ):
        for method in ("clone", "allowed_token_ids", "advance", "is_finished"):
            if not callable(getattr(matcher, method, None)):
                raise TypeError(
                    f"AlignedSampler needs a matcher with a {method}() method, got {type(matcher).__name__}"
                )
        if not isinstance(max_nodes, int) or max_nodes < 1:
            raise ValueError(f"max_nodes must be a positive integer, got {max_nodes!r}")
        self._matcher = matcher
        if eos_token_ids is None:
            eos_token_ids = getattr(getattr(matcher, "vocab", None), "eos_token_ids", ())
        self._eos_token_ids = frozenset(int(token) for token in eos_token_ids)
        self._eos_array = np.array(sorted(self._eos_token_ids), dtype=np.int64)
        self._max_nodes = max_nodes
        self._rng = np.random.default_rng(seed)
        self._samples_drawn = 0
        self._root = _Node(1.0, 0)
        self._node_count = 1
        self._evictions = 0

    @classmethod
    def from_grammar(
        cls,
        grammar,
        vocab,
        *,
        max_tokens: Optional[int] = None,
        max_nodes: int = DEFAULT_MAX_NODES,
        seed: Optional[int] = None,
    ) -> "AlignedSampler":
        """A sampler for ``grammar`` over ``vocab``; ``max_tokens`` bounds each sample
        (budget-aware masking: every sample finishes within it)."""
        from .matcher import Matcher

        return cls(Matcher(grammar, vocab, max_tokens=max_tokens), max_nodes=max_nodes, seed=seed)

    @property
    def max_nodes(self) -> int:
        return self._max_nodes

    @property
    def node_count(self) -> int:
        """Nodes currently held by the trie (the root included)."""
        return self._node_count

    @property
    def samples_drawn(self) -> int:
        return self._samples_drawn

    @property
    def evictions(self) -> int:
        """How many times the trie was shrunk to respect ``max_nodes``."""
        return self._evictions

    def efg(self, token_ids: Sequence[int]) -> float:
        """The current over-approximation of the expected future grammaticality of
        a prefix of allowed tokens (1.0 for a prefix the trie has not seen)."""
        node = self._root
        for token in token_ids:
            if node.children is None or int(token) not in node.children:
                return 1.0
            node = node.children[int(token)]
        return node.efg

    def sample(
        self,
        next_token_logprobs: NextTokenLogprobs,
        *,
        max_steps: Optional[int] = None,
    ) -> AlignedSample:
        """Draw one sample and tighten the EFG bounds along its path.

        ``max_steps`` caps the number of model calls for a grammar without a token
        budget (a sample that hits it is returned with ``complete=False``); with a
        budget-aware matcher every sample finishes on its own. When the grammar ends
        the text by itself (nothing may follow), the model is still asked for its
        end-of-sequence probability there: the target is P(text, end) restricted to
        the grammar, as in the paper.
        """
        if max_steps is not None and max_steps < 1:
            raise ValueError(f"max_steps must be at least 1, got {max_steps!r}")
        self._samples_drawn += 1
        stamp = self._samples_drawn
        matcher = self._matcher.clone()
        node = self._root
        node.last_used = stamp
        path = [node]
        tokens: list[int] = []
        model_logprob = 0.0
        proposal_logprob = 0.0
        steps = 0
        while True:
            if matcher.is_finished():
                if not self._eos_token_ids:
                    break
                # The grammar ended the text (nothing may follow); the model's
                # end-of-sequence mass still belongs to the sample's probability.
                allowed = self._eos_array
            else:
                if max_steps is not None and steps >= max_steps:
                    break
                steps += 1
                allowed = np.asarray(matcher.allowed_token_ids(), dtype=np.int64)
                if allowed.size == 0:
                    raise RuntimeError(
                        "the matcher allows no token although the output is not finished; "
                        "the grammar cannot be completed from here"
                    )
            logprobs = self._model_logprobs(next_token_logprobs, tokens, allowed)
            token, proposal_lp = self._draw(node, logprobs, allowed)
            model_logprob += float(logprobs[token])
            proposal_logprob += proposal_lp
            if token in self._eos_token_ids:
                if not matcher.is_finished():
                    self._advance(matcher, token)
                break
            self._advance(matcher, token)
            tokens.append(token)
            node = self._child(node, token, math.exp(float(logprobs[token])), stamp)
            path.append(node)
        complete = matcher.is_finished()
        self._propagate(path)
        if self._node_count > self._max_nodes:
            self._evict()
        return AlignedSample(tuple(tokens), complete, model_logprob, proposal_logprob)

    def sample_many(self, next_token_logprobs: NextTokenLogprobs, n: int, **kwargs) -> list[AlignedSample]:
        """``n`` successive samples (each one benefits from the ones before)."""
        if not isinstance(n, int) or n < 0:
            raise ValueError(f"n must be a non-negative integer, got {n!r}")
        return [self.sample(next_token_logprobs, **kwargs) for _ in range(n)]

    def next_token_distribution(
        self, token_ids: Sequence[int], logprobs: np.ndarray, allowed: np.ndarray
    ) -> np.ndarray:
        """The sampler's current next-token probabilities after the prefix
        ``token_ids`` given the model's ``logprobs`` there and the ``allowed`` ids
        (one probability per entry of ``allowed``); does not change the trie."""
        node: Optional[_Node] = self._root
        for token in token_ids:
            node = node.children.get(int(token)) if node is not None and node.children else None
        allowed = np.asarray(allowed, dtype=np.int64)
        weights = self._log_weights(node, _log_softmax(logprobs), allowed)
        return _normalise(weights)

    # -- internals -------------------------------------------------------------

    @staticmethod
    def _advance(matcher: PrefixConstraint, token: int) -> None:
        if _is_rejected(matcher.advance(token)):
            raise RuntimeError(f"the matcher rejected token {token} that it had just allowed")

    def _model_logprobs(self, next_token_logprobs, tokens, allowed) -> np.ndarray:
        logprobs = np.asarray(next_token_logprobs(tuple(tokens)))
        if logprobs.ndim != 1:
            raise ValueError(
                f"the model callable must return a 1-D array of next-token log-probabilities, got shape {logprobs.shape}"
            )
        if int(allowed.max()) >= logprobs.shape[0]:
            raise ValueError(
                f"the matcher allows token id {int(allowed.max())} but the model returned only "
                f"{logprobs.shape[0]} log-probabilities"
            )
        return _log_softmax(logprobs)

    def _log_weights(self, node: Optional[_Node], logprobs: np.ndarray, allowed: np.ndarray) -> np.ndarray:
        weights = logprobs[allowed].copy()
        if node is None or not node.children:
            return weights
        count = len(node.children)
        child_tokens = np.fromiter(node.children.keys(), dtype=np.int64, count=count)
        child_efg = np.fromiter((child.efg for child in node.children.values()), dtype=np.float64, count=count)
        order = None if np.all(allowed[1:] > allowed[:-1]) else np.argsort(allowed, kind="stable")
        sorted_allowed = allowed if order is None else allowed[order]
        positions = np.minimum(np.searchsorted(sorted_allowed, child_tokens), sorted_allowed.shape[0] - 1)
        present = sorted_allowed[positions] == child_tokens
        positions = positions[present] if order is None else order[positions[present]]
        with np.errstate(divide="ignore"):
            weights[positions] += np.log(child_efg[present])
        return weights

    def _draw(self, node: _Node, logprobs: np.ndarray, allowed: np.ndarray) -> tuple[int, float]:
        if node.allowed_mass is None:
            allowed_logprobs = logprobs[allowed]
            top = float(np.max(allowed_logprobs))
            node.allowed_mass = (
                math.exp(top) * float(np.sum(np.exp(allowed_logprobs - top))) if np.isfinite(top) else 0.0
            )
        weights = self._log_weights(node, logprobs, allowed)
        if not np.isfinite(np.max(weights)):
            # Every allowed continuation is already known to be (numerically) never
            # grammatical under the model; fall back to constrained decoding so that
            # the output is still a sentence of the grammar.
            weights = logprobs[allowed].copy()
            if not np.isfinite(np.max(weights)):
                weights = np.zeros(allowed.shape[0])
        probabilities = _normalise(weights)
        index = int(np.searchsorted(np.cumsum(probabilities), self._rng.random() * probabilities.sum(), side="right"))
        index = min(index, allowed.shape[0] - 1)
        while probabilities[index] == 0.0 and index > 0:
            index -= 1
        return int(allowed[index]), math.log(float(probabilities[index]))

    def _child(self, node: _Node, token: int, edge_prob: float, stamp: int) -> _Node:
        if node.children is None:
            node.children = {}
        child = node.children.get(token)
        if child is None:
            child = _Node(edge_prob, stamp)
            node.children[token] = child
            self._node_count += 1
        child.last_used = stamp
        return child

    def _propagate(self, path: list[_Node]) -> None:
        """Tighten the EFG of every node on the sampled path, deepest first (Eq. 3)."""
        for depth in range(len(path) - 1, 0, -1):
            child = path[depth]
            before = child.efg
            after = child.recompute()
            if after != before:
                path[depth - 1].lost += child.edge_prob * (before - after)
        self._root.recompute()

    def _evict(self) -> None:
        """Collapse the least recently used subtrees until the trie is back under
        the low-water mark; collapsed nodes keep their EFG as a frozen bound."""
        target = max(1, int(self._max_nodes * _EVICTION_LOW_WATER))
        candidates: list[tuple[int, int, int, _Node]] = []
        stack = [(self._root, 0)]
        order = 0
        while stack:
            node, depth = stack.pop()
            if node.children:
                if depth > 0:
                    candidates.append((node.last_used, depth, order, node))
                    order += 1
                stack.extend((child, depth + 1) for child in node.children.values())
        candidates.sort(key=lambda item: item[:3])
        for _, _, _, node in candidates:
            if self._node_count <= target:
                break
            if node.last_used < 0:
                continue  # already removed with an ancestor's subtree
            self._node_count -= self._detach_descendants(node)
            node.bound = node.efg
            node.children = None
            node.lost = 0.0
        if self._node_count > target and self._root.children:
            # Only the root's direct children are left; forget the coldest of them.
            # An unknown child counts as EFG 1, so the root's value only loosens.
            for token, child in sorted(self._root.children.items(), key=lambda item: item[1].last_used):
                if self._node_count <= target:
                    break
                self._node_count -= 1 + self._detach_descendants(child)
                self._root.lost -= child.edge_prob * (1.0 - child.efg)
                del self._root.children[token]
            self._root.lost = max(0.0, self._root.lost)
            self._root.recompute()
        self._evictions += 1

    @staticmethod
    def _detach_descendants(node: _Node) -> int:
        removed = 0
        stack = list(node.children.values()) if node.children else []
        while stack:
            current = stack.pop()
            current.last_used = -1
            removed += 1
            if current.children:
                stack.extend(current.children.values())
        return removed


def _normalise(log_weights: np.ndarray) -> np.ndarray:
    top = float(np.max(log_weights))
    if not np.isfinite(top):
        return np.full(log_weights.shape[0], 1.0 / max(1, log_weights.shape[0]))
    probabilities = np.exp(log_weights - top)
    return probabilities / probabilities.sum()


def _is_rejected(status: object) -> bool:
    name = getattr(status, "name", status)
    return isinstance(name, str) and name.upper() == "REJECTED"
