"""surecall's decode loop over a transformers causal language model.

One loop serves a single request or a batch of independent requests (different prompts,
lengths, grammars and sampling settings). Per step it:

1. feeds every live row's pending tokens (the prompt, then the last sampled token plus any
   forced continuation) in ONE forward pass over the KV cache. Rows with fewer pending tokens
   are left-padded inside the step; the attention mask hides the padding and explicit
   position ids keep positions contiguous;
2. while that forward pass runs (asynchronously on CUDA), fills each row's packed token
   bitmask on the host from its matcher;
3. applies all masks on the device in one vectorised op and samples one token per row;
4. advances the matchers; when a matcher says the continuation is forced, appends the forced
   tokens without sampling (they are evaluated together in the next forward pass).

Forced tokens are tokenized the way the tokenizer would tokenize the text in context: the
forced text is encoded together with the last committed tokens, and trailing tokens that
would merge with whatever text comes next are held back and left to the model (see
``ContextualForcing``).
"""

from __future__ import annotations

import codecs
import contextlib
import inspect
import threading
from dataclasses import dataclass
from typing import Callable, Iterator, Sequence

import numpy as np
import torch

from surecall.adapters.transformers.masking import BitmaskBuffer
from surecall.engine import Grammar, Matcher, Status

FINISH_STOP = "stop"
FINISH_LENGTH = "length"

# Continuations tried after a forced text to find which of its trailing tokens stay stable
# whatever follows. Grammar-derived continuations (the tokens actually allowed next) are added
# per call; these cover the character classes pre-tokenizers split on.
_STABILITY_PROBES = (
    "a", "A", "é", "0", "9", " ", " a", " 0", "  ", "\n", "\n\n", "\t", '"', "'", ",", ".", ":",
    ";", "}", "]", ")", "{", "[", "(", "-", "_", "/", "\\", "!", "?", "*", "#", "@", "=", "<", ">",
)
_MAX_GRAMMAR_PROBES = 48
_CONTEXT_TOKENS = 3
_TAIL_TOKENS = 3


@dataclass
class DecodeResult:
    """Outcome of one request.

    ``token_ids`` are the completion tokens (sampled and forced), without the final EOS;
    ``finish_reason`` is ``"stop"`` (EOS, grammar finished or a stop string) or ``"length"``;
    ``forward_passes`` counts the model forward passes this request took part in.
    """

    text: str
    token_ids: list[int]
    prompt_tokens: int
    completion_tokens: int
    finish_reason: str
    forward_passes: int


@dataclass
class DecodeRequest:
    """One independent request in a batch; ``constraint`` is a Grammar, a ready Matcher or None."""

    prompt_ids: Sequence[int]
    constraint: Grammar | Matcher | None = None
    max_tokens: int = 256
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int | None = None
    seed: int | None = None
    stop: Sequence[str] | None = None
    on_text: Callable[[str], None] | None = None

    def validate(self) -> None:
        if len(self.prompt_ids) == 0:
            raise ValueError("the prompt is empty: at least one prompt token is needed")
        if not isinstance(self.max_tokens, int) or isinstance(self.max_tokens, bool) or self.max_tokens < 1:
            raise ValueError(f"max_tokens must be a positive integer, got {self.max_tokens!r}")
        if not self.temperature >= 0.0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature!r}")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p!r}")
        if self.top_k is not None and (not isinstance(self.top_k, int) or self.top_k < 1):
            raise ValueError(f"top_k must be a positive integer or None, got {self.top_k!r}")
        if self.stop is not None:
            if isinstance(self.stop, str):
                raise ValueError("stop must be a list of strings, not a single string")
            if any(not isinstance(s, str) or not s for s in self.stop):
                raise ValueError("every stop string must be a non-empty string")
        if self.constraint is not None and not isinstance(self.constraint, (Grammar, Matcher)):
            if not (hasattr(self.constraint, "advance") and hasattr(self.constraint, "fill_bitmask")):
                raise TypeError(
                    "constraint must be a surecall Grammar, a Matcher or None, "
                    f"got {type(self.constraint).__name__}"
                )


def decode(
    local_model,
    prompt_ids: Sequence[int],
    grammar: Grammar | Matcher | None,
    *,
    max_tokens: int,
    temperature: float = 0.0,
    top_p: float = 1.0,
    top_k: int | None = None,
    seed: int | None = None,
    stop: Sequence[str] | None = None,
    on_text: Callable[[str], None] | None = None,
    fast_forward: bool = True,
) -> DecodeResult:
    """Generate a completion for one prompt, constrained by ``grammar`` when given.

    With a grammar, ``max_tokens`` is a guarantee: the matcher is built with that budget, so
    the output is complete whenever any completion fits, and ``TokenBudgetError`` is raised
    before generating when none does. A ready ``Matcher`` is used as it is (its own budget).
    ``fast_forward`` appends forced continuations without sampling them.
    """
    request = DecodeRequest(
        prompt_ids=list(prompt_ids),
        constraint=grammar,
        max_tokens=max_tokens,
        temperature=temperature,
        top_p=top_p,
        top_k=top_k,
        seed=seed,
        stop=stop,
        on_text=on_text,
    )
    return run_requests(local_model, [request], fast_forward=fast_forward)[0]


def decode_batch(
    local_model,
    prompt_ids: Sequence[Sequence[int]],
    constraints: Sequence[Grammar | Matcher | None] | None = None,
    *,
    max_tokens: int | Sequence[int] = 256,
    temperature: float | Sequence[float] = 0.0,
    top_p: float | Sequence[float] = 1.0,
    top_k: int | None | Sequence[int | None] = None,
    seed: int | None | Sequence[int | None] = None,
    stop: Sequence[str] | None | Sequence[Sequence[str] | None] = None,
    on_text: Callable[[str], None] | None | Sequence[Callable[[str], None] | None] = None,
    fast_forward: bool = True,
) -> list[DecodeResult]:
    """Decode several independent prompts together, one forward pass per step for all of them.

    ``constraints`` has one Grammar / Matcher / None per prompt (None: all unconstrained).
    Every other setting is one value for all rows or a list with one value per row; a single
    seed is used as is by every row, so a row samples the same tokens batched or alone.
    """
    rows = len(prompt_ids)
    if constraints is None:
        constraints = [None] * rows
    if len(constraints) != rows:
        raise ValueError(f"got {rows} prompts but {len(constraints)} constraints")

    def per_row(name, value, is_single):
        if is_single(value):
            return [value] * rows
        values = list(value)
        if len(values) != rows:
            raise ValueError(f"{name} has {len(values)} values for {rows} prompts")
        return values

    scalar = lambda v: v is None or isinstance(v, (int, float))  # noqa: E731
    requests = [
        DecodeRequest(prompt_ids=list(p), constraint=c, max_tokens=m, temperature=t, top_p=tp, top_k=k,
                      seed=sd, stop=st, on_text=cb)
        for p, c, m, t, tp, k, sd, st, cb in zip(
            prompt_ids,
            constraints,
            per_row("max_tokens", max_tokens, scalar),
            per_row("temperature", temperature, scalar),
            per_row("top_p", top_p, scalar),
            per_row("top_k", top_k, scalar),
            per_row("seed", seed, scalar),
            per_row("stop", stop, lambda v: v is None or isinstance(v, str) or all(isinstance(s, str) for s in v)),
            per_row("on_text", on_text, lambda v: v is None or callable(v)),
        )
    ]
    return run_requests(local_model, requests, fast_forward=fast_forward)


def run_requests(local_model, requests: Sequence[DecodeRequest], *, fast_forward: bool = True) -> list[DecodeResult]:
    """Decode prepared requests together, calling each one's ``on_text`` as text is produced."""
    events = iter_decode(local_model, requests, fast_forward=fast_forward)
    while True:
        try:
            row, piece = next(events)
        except StopIteration as done:
            return done.value
        callback = requests[row].on_text
        if callback is not None:
            callback(piece)


def iter_decode(
    local_model, requests: Sequence[DecodeRequest], *, fast_forward: bool = True
) -> Iterator[tuple[int, str]]:
    """Generator of ``(request index, text piece)`` as text is produced; returns the results.

    Text held back because it might start a stop string is released once it cannot.
    """
    decoder = _BatchDecoder(local_model, requests, fast_forward=fast_forward)
    return decoder.run()


class ContextualForcing:
    """Turns a matcher's forced text into the tokens the tokenizer would produce in context.

    The engine knows which bytes are forced, but not how the tokenizer splits them next to the
    text around them. The forced text is encoded together with the last committed tokens
    (it must not change how those are split: if it would merge into them, nothing is forced
    and the model samples instead), and only the leading tokens that stay the same whatever
    follows are returned: the rest may merge with the free text after it, so it is left to
    the model, under the grammar's mask.
    """

    def __init__(self, encode_many: Callable[[list[str]], list[list[int]]], vocabulary):
        self._encode_many = encode_many
        self._vocab = vocabulary
        self._special = frozenset(vocabulary.special_ids)

    @classmethod
    def for_tokenizer(cls, tokenizer, vocabulary) -> "ContextualForcing":
        """Hugging Face tokenizers encode a whole batch of texts in one native call; others loop."""
        if callable(tokenizer) and hasattr(tokenizer, "add_special_tokens"):

            def encode_many(texts: list[str]) -> list[list[int]]:
                return [list(ids) for ids in tokenizer(texts, add_special_tokens=False)["input_ids"]]

        else:

            def encode_many(texts: list[str]) -> list[list[int]]:
                return [list(tokenizer.encode(text)) for text in texts]

        return cls(encode_many, vocabulary)

    def _bytes_of(self, ids: Sequence[int]) -> bytes:
        return b"".join(self._vocab.token_bytes(i) for i in ids)

    def forced_tokens(self, matcher, committed_ids: Sequence[int]) -> list[int]:
        """Token ids to append now (possibly empty); the matcher is left unchanged."""
        forced_bytes, _ = matcher.forced()
        if not forced_bytes:
            return []
        for context_size in dict.fromkeys((min(_CONTEXT_TOKENS, len(committed_ids)), min(1, len(committed_ids)))):
            tokens = self._forced_after(matcher, forced_bytes, list(committed_ids[len(committed_ids) - context_size:]))
            if tokens is not None:
                return tokens
        return []

    def _forced_after(self, matcher, forced_bytes: bytes, context_ids: list[int]) -> list[int] | None:
        context_bytes = self._bytes_of(context_ids)
        try:
            context_text = context_bytes.decode("utf-8")
            forced_text = forced_bytes.decode("utf-8")
        except UnicodeDecodeError:
            return None
        encoded = self._encode_many([context_text + forced_text])[0]
        if encoded[: len(context_ids)] != context_ids:
            return None
        candidate = encoded[len(context_ids):]
        if not candidate or any(i in self._special for i in candidate):
            return None
        if self._bytes_of(candidate) != forced_bytes:
            return None

        # Check the candidate against the grammar (and its token budget) on a copy.
        probe_matcher = matcher.clone()
        for token in candidate:
            if probe_matcher.advance(token) == Status.REJECTED:
                return None
        if probe_matcher.is_finished():
            return candidate
        remaining = probe_matcher.remaining_tokens
        if remaining is not None and probe_matcher.min_tokens_to_finish() > remaining:
            return None

        # Only the last few forced tokens can merge with what follows; re-encode just those
        # (with the continuations) instead of the whole forced text, when they encode alone
        # to the same tokens.
        continuations = self._continuations(probe_matcher)
        tail = candidate[-_TAIL_TOKENS:]
        if not _is_utf8(self._bytes_of(tail)):
            tail = candidate
        encodings = None
        while encodings is None:
            tail_text = self._bytes_of(tail).decode("utf-8")
            encodings = self._encode_many([tail_text] + [tail_text + c for c in continuations])
            if encodings[0] != tail:
                if tail == candidate:
                    return None
                tail, encodings = candidate, None
        stable = len(tail)
        for extended in encodings[1:]:
            stable = min(stable, _common_prefix_length(tail, extended))
        return candidate[: len(candidate) - len(tail) + stable]

    def _continuations(self, matcher) -> list[str]:
        """Texts that may follow: fixed probes plus a sample of the tokens the grammar allows next."""
        probes = list(_STABILITY_PROBES)
        allowed = np.asarray(matcher.allowed_token_ids())
        if allowed.size:
            seen_first: set[str] = set()
            step = max(1, allowed.size // (_MAX_GRAMMAR_PROBES * 8))
            for token in allowed[::step]:
                token = int(token)
                if token in self._special:
                    continue
                try:
                    text = self._vocab.token_bytes(token).decode("utf-8")
                except UnicodeDecodeError:
                    continue
                if not text or text[0] in seen_first:
                    continue
                seen_first.add(text[0])
                probes.append(text)
                if len(seen_first) >= _MAX_GRAMMAR_PROBES:
                    break
        return probes


def _is_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _common_prefix_length(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


class _Row:
    """Decoding state of one request."""

    def __init__(self, index: int, request: DecodeRequest, vocabulary, device: torch.device):
        self.index = index
        self.request = request
        self.prompt_ids = [int(t) for t in request.prompt_ids]
        constraint = request.constraint
        if isinstance(constraint, Grammar):
            constraint = Matcher(constraint, vocabulary, max_tokens=request.max_tokens)
        self.matcher = constraint
        self.vocabulary = vocabulary
        self.generated: list[int] = []
        self.pending: list[int] = list(self.prompt_ids)
        self.finish_reason: str | None = None
        self.forward_passes = 0
        self.generator = None
        if request.temperature > 0.0 and request.seed is not None:
            self.generator = torch.Generator(device=device)
            self.generator.manual_seed(int(request.seed))
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.text = ""
        self._released = 0
        self._stops = tuple(request.stop or ())
        self._hold = max((len(s) for s in self._stops), default=1) - 1

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None

    def finish(self, reason: str) -> None:
        if self.finish_reason is None:
            self.finish_reason = reason
            self.pending = []
            self.text += self._utf8.decode(b"", final=True)

    def append(self, token: int) -> None:
        """Record a completion token (never EOS) and check stop strings and the length limit."""
        self.generated.append(token)
        if token not in self.vocabulary.special_ids:
            before = len(self.text)
            self.text += self._utf8.decode(self.vocabulary.token_bytes(token))
            self._check_stop(before)
        if not self.finished and len(self.generated) >= self.request.max_tokens:
            complete = self.matcher is None or self.matcher.is_accepting()
            self.finish(FINISH_STOP if complete and self.matcher is not None else FINISH_LENGTH)

    def _check_stop(self, previous_length: int) -> None:
        for stop in self._stops:
            at = self.text.find(stop, max(0, previous_length - len(stop) + 1))
            if at >= 0:
                self.text = self.text[:at]
                self.finish(FINISH_STOP)
                return

    def releasable_text(self) -> str:
        """Text not yet handed to the caller that can no longer become part of a stop string."""
        end = len(self.text) if self.finished else max(self._released, len(self.text) - self._hold)
        piece = self.text[self._released:end]
        self._released = end
        return piece

    def result(self) -> DecodeResult:
        return DecodeResult(
            text=self.text,
            token_ids=list(self.generated),
            prompt_tokens=len(self.prompt_ids),
            completion_tokens=len(self.generated),
            finish_reason=self.finish_reason or FINISH_LENGTH,
            forward_passes=self.forward_passes,
        )


class _BatchDecoder:
    def __init__(self, local_model, requests: Sequence[DecodeRequest], *, fast_forward: bool):
        if not requests:
            raise ValueError("no requests to decode")
        for request in requests:
            request.validate()
        self.local_model = local_model
        self.model = local_model.model
        self.vocabulary = local_model.vocabulary
        self.device = torch.device(local_model.device)
        self.fast_forward = fast_forward
        # Building the matchers checks every token budget before any forward pass.
        self.rows = [_Row(i, r, self.vocabulary, self.device) for i, r in enumerate(requests)]
        self.eos_ids = _eos_ids(local_model)
        self.pad_id = _pad_id(local_model, self.eos_ids)
        self.forcing = ContextualForcing.for_tokenizer(local_model.tokenizer, self.vocabulary) if fast_forward else None
        self._lock = getattr(local_model, "lock", None)
        self._keeps_last_logits_only = "logits_to_keep" in inspect.signature(self.model.forward).parameters
        self._cache_argument = local_model.cache_argument
        self.masks = BitmaskBuffer(len(self.rows), self.vocabulary.size, self.device)
        self._live: list[_Row] = []
        self._cache = None
        self._attention: torch.Tensor | None = None

    def run(self):
        if self.fast_forward:
            for row in self.rows:
                if row.matcher is not None:
                    self._take_forced(row)
        yield from self._release_text()
        # Inference mode is entered per step, never across a yield, so it does not leak into
        # the caller's code while a stream is suspended.
        while self._step():
            yield from self._release_text()
        yield from self._release_text()
        return [row.result() for row in self.rows]

    @torch.inference_mode()
    def _step(self) -> bool:
        """One forward pass for every live row and one sampled token each; False when all are done."""
        still_live = [row for row in self.rows if not row.finished]
        if not still_live:
            return False
        if self._live and len(still_live) != len(self._live):
            keep = torch.tensor([self._live.index(row) for row in still_live], device=self.device)
            self._cache.batch_select_indices(keep)
            self._attention = self._attention.index_select(0, keep)
        elif not self._live:
            self._cache = self._new_cache()
            self._attention = torch.zeros((len(still_live), 0), dtype=torch.long, device=self.device)
        self._live = still_live

        logits = self._forward(still_live)
        self._fill_masks(still_live)
        tokens = self._sample(still_live, logits)
        for row, token in zip(still_live, tokens):
            self._accept(row, token)
        return True

    def _release_text(self):
        for row in self.rows:
            piece = row.releasable_text()
            if piece:
                yield row.index, piece

    def _new_cache(self):
        from transformers import DynamicCache

        try:
            return DynamicCache(config=self.model.config)
        except TypeError:
            return DynamicCache()

    def _forward(self, live: list[_Row]) -> torch.Tensor:
        width = max(len(row.pending) for row in live)
        input_ids = torch.full((len(live), width), self.pad_id, dtype=torch.long)
        step_mask = torch.zeros((len(live), width), dtype=torch.long)
        for i, row in enumerate(live):
            n = len(row.pending)
            input_ids[i, width - n:] = torch.tensor(row.pending, dtype=torch.long)
            step_mask[i, width - n:] = 1
            row.pending = []
            row.forward_passes += 1
        attention = torch.cat([self._attention, step_mask.to(self.device)], dim=1)
        self._attention = attention
        position_ids = (attention.cumsum(dim=1) - 1).clamp(min=0)[:, -width:]
        kwargs = dict(
            input_ids=input_ids.to(self.device),
            attention_mask=attention,
            position_ids=position_ids,
            use_cache=True,
        )
        kwargs[self._cache_argument] = self._cache
        if self._keeps_last_logits_only:
            kwargs["logits_to_keep"] = 1
        with self._lock if self._lock is not None else contextlib.nullcontext(), attention_without_cudnn(self.device):
            output = self.model(**kwargs)
        return output.logits[:, -1, :]

    def _fill_masks(self, live: list[_Row]) -> None:
        # Runs while the forward pass is still executing on an asynchronous device.
        for i, row in enumerate(live):
            if row.matcher is None:
                self.masks.allow_all(i)
            else:
                row.matcher.fill_bitmask(self.masks.array[i])

    def _sample(self, live: list[_Row], logits: torch.Tensor) -> list[int]:
        scores = logits.float()
        if any(row.matcher is not None for row in live):
            self.masks.apply_(scores, len(live))
        tokens = scores.argmax(dim=-1)
        sampled_rows = [i for i, row in enumerate(live) if row.request.temperature > 0.0]
        if sampled_rows:
            tokens = tokens.clone()
            for i in sampled_rows:
                request = live[i].request
                tokens[i] = _sample_row(scores[i], request.temperature, request.top_k, request.top_p, live[i].generator)
        return tokens.tolist()

    def _accept(self, row: _Row, token: int) -> None:
        if row.matcher is None:
            if token in self.eos_ids:
                row.finish(FINISH_STOP)
                return
            row.append(token)
        else:
            status = row.matcher.advance(token)
            if status == Status.REJECTED:
                raise RuntimeError(
                    f"internal error: the matcher rejected token {token} that its own mask allowed"
                )
            if token in self.vocabulary.eos_token_ids:
                row.finish(FINISH_STOP)
                return
            row.append(token)
            if status == Status.FINISHED or row.matcher.is_finished():
                row.finish(FINISH_STOP)
        if row.finished:
            return
        row.pending = [token]
        if self.fast_forward and row.matcher is not None:
            self._take_forced(row)

    def _take_forced(self, row: _Row) -> None:
        if not hasattr(row.matcher, "forced"):
            return  # a custom constraint without forced continuations
        forced = self.forcing.forced_tokens(row.matcher, row.generated)
        for token in forced:
            status = row.matcher.advance(token)
            if status == Status.REJECTED:
                raise RuntimeError(f"internal error: the matcher rejected its own forced token {token}")
            row.pending.append(token)
            row.append(token)
            if status == Status.FINISHED or row.matcher.is_finished():
                row.finish(FINISH_STOP)
            if row.finished:
                return


_cudnn_attention_lock = threading.Lock()
_cudnn_attention_users = 0
_cudnn_attention_was_enabled = True


@contextlib.contextmanager
def attention_without_cudnn(device: torch.device) -> Iterator[None]:
    """Keeps scaled-dot-product attention off its cuDNN backend during a forward pass on CUDA.

    Every pass of this loop gives attention an explicit mask, which torch may hand to cuDNN
    first on recent GPUs, and cuDNN builds an execution plan for each new shape. The cache
    grows by a step each pass, so every shape is new the first time through: on an H200,
    first-round passes took 72-91 ms on average for one token and up to 740 ms for a run of
    forced tokens, against 21-42 ms once their shapes had been seen (README.md, end to end
    on a GPU), the signature of such plans. The flash and memory-efficient kernels build
    none.

    The switch is process-wide, so concurrent loops share it: the first to enter turns cuDNN
    off and the last to leave restores what was set before.
    """
    global _cudnn_attention_users, _cudnn_attention_was_enabled
    backends = torch.backends.cuda
    if device.type != "cuda" or not hasattr(backends, "cudnn_sdp_enabled"):  # a torch without cuDNN attention
        yield
        return
    with _cudnn_attention_lock:
        if _cudnn_attention_users == 0:
            _cudnn_attention_was_enabled = backends.cudnn_sdp_enabled()
            backends.enable_cudnn_sdp(False)
        _cudnn_attention_users += 1
    try:
        yield
    finally:
        with _cudnn_attention_lock:
            _cudnn_attention_users -= 1
            if _cudnn_attention_users == 0:
                backends.enable_cudnn_sdp(_cudnn_attention_was_enabled)


def _sample_row(scores: torch.Tensor, temperature: float, top_k: int | None, top_p: float, generator) -> int:
    scores = scores / temperature
    if top_k is not None and top_k < scores.shape[-1]:
        kth = torch.topk(scores, top_k).values[-1]
        scores = scores.masked_fill(scores < kth, float("-inf"))
    if top_p < 1.0:
        ordered, order = torch.sort(scores, descending=True)
        probabilities = torch.softmax(ordered, dim=-1)
        before = torch.cumsum(probabilities, dim=-1) - probabilities
        drop = before > top_p
        scores = scores.clone()
        scores[order[drop]] = float("-inf")
    probabilities = torch.softmax(scores, dim=-1)
    return int(torch.multinomial(probabilities, 1, generator=generator).item())


def _eos_ids(local_model) -> frozenset[int]:
    ids = set(local_model.vocabulary.eos_token_ids)
    config = getattr(local_model.model, "generation_config", None)
    configured = getattr(config, "eos_token_id", None)
    if isinstance(configured, int):
        ids.add(configured)
    elif configured:
        ids.update(int(i) for i in configured)
    if getattr(local_model.tokenizer, "eos_token_id", None) is not None:
        ids.add(int(local_model.tokenizer.eos_token_id))
    return frozenset(ids)


def _pad_id(local_model, eos_ids: frozenset[int]) -> int:
    pad = getattr(local_model.tokenizer, "pad_token_id", None)
    if pad is not None:
        return int(pad)
    return min(eos_ids) if eos_ids else 0
