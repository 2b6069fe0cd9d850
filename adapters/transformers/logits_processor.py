"""``SurecallLogitsProcessor``: grammar constraints inside ``model.generate(...)``.

One matcher per batch row, each prompt with its own grammar (or none). ``generate`` may expand
each prompt into several rows (beams, ``num_return_sequences``) and, under beam search,
reorder and duplicate rows between steps. The processor does not rely on beam indices: it
remembers the generated tokens each matcher has consumed and, at every step, finds the
matcher whose history is the row's sequence minus its newest token (cloning it when several
rows continue the same parent), then advances it by that token.
"""

from __future__ import annotations

import numpy as np
import torch
from transformers import LogitsProcessor

from surecall.adapters.transformers.masking import BitmaskBuffer
from surecall.engine import Grammar, Matcher, Status

__all__ = ["SurecallLogitsProcessor"]


class _RowState:
    __slots__ = ("matcher", "dead")

    def __init__(self, matcher: Matcher | None, dead: bool = False):
        self.matcher = matcher
        # A beam-search candidate outside the grammar (picked only when fewer allowed tokens
        # than candidates exist); its score is -inf, it only needs to end.
        self.dead = dead


class SurecallLogitsProcessor(LogitsProcessor):
    """Masks ``generate``'s scores so every row follows its grammar.

    ``constraints`` is one ``Grammar`` / ``Matcher`` / ``None`` for all prompts, or a list
    with one per prompt (``None``: that row is unconstrained). ``vocabulary`` is the
    ``TokenVocabulary`` of the model's tokenizer (``LocalModel.vocabulary``). ``max_tokens``
    gives every matcher a token budget: with ``max_new_tokens > max_tokens`` each row ends
    complete. A processor follows one ``generate`` call at a time; it resets itself when a new
    call starts.
    """

    def __init__(self, constraints, vocabulary, *, max_tokens: int | None = None):
        if isinstance(constraints, (Grammar, Matcher)) or constraints is None:
            constraints = [constraints]
        constraints = list(constraints)
        if not constraints:
            raise ValueError("SurecallLogitsProcessor needs at least one constraint (or None)")
        for constraint in constraints:
            if constraint is not None and not isinstance(constraint, (Grammar, Matcher)):
                raise TypeError(f"constraints must be Grammar, Matcher or None, got {type(constraint).__name__}")
        self._vocabulary = vocabulary
        self._max_tokens = max_tokens
        self._eos_ids = sorted(vocabulary.eos_token_ids)
        # Budgets are checked now, before generate() runs a forward pass.
        self._templates = [self._matcher_for(c) for c in constraints]
        self.reset()

    def _matcher_for(self, constraint) -> Matcher | None:
        if isinstance(constraint, Grammar):
            return Matcher(constraint, self._vocabulary, max_tokens=self._max_tokens)
        return constraint

    def reset(self) -> None:
        self._prompt_length: int | None = None
        self._last_length: int | None = None
        self._rows_per_prompt = 1
        self._states: dict[tuple[int, tuple[int, ...]], _RowState] = {}
        self._buffer: BitmaskBuffer | None = None

    def _start(self, input_ids: torch.LongTensor) -> None:
        rows = input_ids.shape[0]
        prompts = len(self._templates)
        if rows % prompts != 0:
            raise ValueError(f"generate() has {rows} rows, which is not a multiple of the {prompts} constraints given")
        # Rows of one prompt (its beams or return sequences) are contiguous in generate(); with a
        # single constraint every row shares it, so all rows form one group keyed by history.
        self._rows_per_prompt = rows // prompts
        self._prompt_length = input_ids.shape[1]
        self._states = {}
        for prompt_index, template in enumerate(self._templates):
            if template is not None:
                template.reset()
            self._states[(prompt_index, ())] = _RowState(template)

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        length = input_ids.shape[1]
        if self._prompt_length is None or self._last_length is None or length != self._last_length + 1:
            self._start(input_ids)
        self._last_length = length

        generated = input_ids[:, self._prompt_length:].tolist()
        row_keys = [(row // self._rows_per_prompt, tuple(history)) for row, history in enumerate(generated)]
        # Group the distinct new histories by the history they continue; the parent's matcher
        # is cloned for all but one child before any child advances it.
        children: dict[tuple[int, tuple[int, ...]], list[tuple[int, tuple[int, ...]]]] = {}
        for key in dict.fromkeys(row_keys):
            prompt_index, history = key
            parent_key = key if not history else (prompt_index, history[:-1])
            children.setdefault(parent_key, []).append(key)
        next_states: dict[tuple[int, tuple[int, ...]], _RowState] = {}
        for parent_key, keys in children.items():
            parent = self._states.get(parent_key)
            if parent is None:
                raise RuntimeError(
                    "SurecallLogitsProcessor lost track of a row's history; use one processor per "
                    "generate() call and do not share it between concurrent calls"
                )
            states = [parent] + [_copy(parent) for _ in keys[1:]]
            for key, state in zip(keys, states):
                if key != parent_key:
                    _advance(state, key[1][-1])
                next_states[key] = state
        self._states = next_states
        return self._mask(scores, [next_states[key] for key in row_keys])

    def _mask(self, scores: torch.FloatTensor, row_states: list[_RowState]) -> torch.FloatTensor:
        rows = len(row_states)
        if self._buffer is None or self._buffer.host.shape[0] < rows or self._buffer.device != scores.device:
            self._buffer = BitmaskBuffer(rows, self._vocabulary.size, scores.device)
        words = self._buffer.array
        for row, state in enumerate(row_states):
            if state.matcher is None:
                self._buffer.allow_all(row)
            elif state.dead or state.matcher.is_finished():
                words[row].fill(0)
                unsigned = words[row].view(np.uint32)
                for eos in self._eos_ids:
                    unsigned[eos >> 5] |= np.uint32(1 << (eos & 31))
            else:
                state.matcher.fill_bitmask(words[row])
        return self._buffer.apply_(scores, rows)


def _copy(state: _RowState) -> _RowState:
    return _RowState(None if state.matcher is None else state.matcher.clone(), state.dead)


def _advance(state: _RowState, token: int) -> None:
    if state.matcher is None or state.dead or state.matcher.is_finished():
        return
    if state.matcher.advance(int(token)) == Status.REJECTED:
        state.dead = True
