"""Input batches. Synthetic by default: a characterization measures kernels, not data loading."""

from __future__ import annotations

from pathlib import Path

import torch

from ssmprof.errors import InputFileError


def token_batch(batch_size: int, seq_len: int, vocab_size: int, device: torch.device,
                generator: torch.Generator, text_file: str | None = None) -> dict:
    """`input_ids` and next-token `labels`, uniform random tokens or byte windows of a local text file."""
    if text_file is None:
        tokens = torch.randint(0, vocab_size, (batch_size, seq_len + 1), generator=generator)
    else:
        tokens = _text_windows(Path(text_file), batch_size, seq_len, vocab_size, generator)
    tokens = tokens.to(device)
    return {"input_ids": tokens[:, :-1].contiguous(), "labels": tokens[:, 1:].contiguous()}


def _text_windows(path: Path, batch_size: int, seq_len: int, vocab_size: int,
                  generator: torch.Generator) -> torch.Tensor:
    """Random windows of the file's bytes (byte-level tokens, so the vocabulary must hold 256)."""
    if vocab_size < 256:
        raise InputFileError(f"a text file needs vocab_size >= 256 (byte tokens), got {vocab_size}")
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise InputFileError(f"cannot read text file {path}: {exc.strerror}") from None
    if len(data) < seq_len + 1:
        raise InputFileError(f"text file {path} has {len(data)} bytes, fewer than seq_len+1 = {seq_len + 1}")
    stream = torch.frombuffer(bytearray(data), dtype=torch.uint8).long()
    starts = torch.randint(0, len(data) - seq_len, (batch_size,), generator=generator)
    return torch.stack([stream[s : s + seq_len + 1] for s in starts.tolist()])
