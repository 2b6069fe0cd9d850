"""Packed token bitmasks: filled on the host by matchers, applied to logits on the model's device.

A matcher writes one int32 word per 32 tokens (token ``i`` allowed iff bit ``i & 31`` of word
``i >> 5`` is set). The words travel to the device as they are (32x smaller than a bool mask)
and are unpacked there with shifts, so the mask costs one small copy and a few vectorised ops
per step, whatever the batch size.
"""

from __future__ import annotations

import numpy as np
import torch

ALL_ALLOWED = np.int32(-1)


class BitmaskBuffer:
    """Host rows of packed bitmask words for a batch, and their transfer to the device.

    On CUDA the host buffer is pinned, so the copy is asynchronous and the CPU can fill the
    next rows while the GPU is still busy with the forward pass.
    """

    def __init__(self, rows: int, vocab_size: int, device: torch.device | str):
        self.device = torch.device(device)
        self.vocab_size = vocab_size
        self.words_per_row = (vocab_size + 31) // 32
        pinned = self.device.type == "cuda"
        self.host = torch.zeros((rows, self.words_per_row), dtype=torch.int32, pin_memory=pinned)
        self.array = self.host.numpy()
        self._shifts = torch.arange(32, dtype=torch.int32, device=self.device)

    def allow_all(self, row: int) -> None:
        self.array[row].fill(ALL_ALLOWED)

    def to_device(self, rows: int) -> torch.Tensor:
        return self.host[:rows].to(self.device, non_blocking=True)

    def apply_(self, logits: torch.Tensor, rows: int | None = None) -> torch.Tensor:
        """Set every disallowed logit of the first ``rows`` rows to -inf, in place."""
        rows = logits.shape[0] if rows is None else rows
        words = self.to_device(rows)
        return apply_bitmask_(logits[:rows], words, self._shifts)


def unpack_bitmask(words: torch.Tensor, width: int, shifts: torch.Tensor | None = None) -> torch.Tensor:
    """Boolean mask ``[rows, width]`` from packed int32 words ``[rows, ceil(width / 32)]`` or more."""
    if shifts is None:
        shifts = torch.arange(32, dtype=torch.int32, device=words.device)
    # Arithmetic shift keeps the sign bit in bit 31, and `& 1` reads exactly one bit, so the
    # sign of the int32 word does not matter.
    bits = torch.bitwise_and(torch.bitwise_right_shift(words.unsqueeze(-1), shifts), 1)
    flat = bits.reshape(words.shape[0], -1)
    if flat.shape[1] >= width:
        return flat[:, :width].bool()
    # The model has more logits rows than the vocabulary knows (padded embeddings): never allowed.
    allowed = torch.zeros((words.shape[0], width), dtype=torch.bool, device=words.device)
    allowed[:, : flat.shape[1]] = flat.bool()
    return allowed


def apply_bitmask_(logits: torch.Tensor, words: torch.Tensor, shifts: torch.Tensor | None = None) -> torch.Tensor:
    """In place: logits of tokens whose bit is clear in ``words`` become -inf."""
    allowed = unpack_bitmask(words.to(logits.device), logits.shape[-1], shifts)
    return logits.masked_fill_(~allowed, float("-inf"))
