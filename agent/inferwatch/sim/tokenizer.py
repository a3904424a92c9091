"""A deterministic stand-in tokenizer: whitespace words cut into chunks of 4 characters.

Real tokenizers average about 4 characters per English token, so prompt lengths
come out in the right range. Token ids are CRC32 values of the chunks, stable
across processes, so two requests that share a system prompt share their
leading token ids and hit the simulated prefix cache exactly as vLLM's
block hashes would.
"""

from __future__ import annotations

import random
import zlib
from collections.abc import Iterable, Mapping

CHUNK = 4
VOCAB_SIZE = 32000

# Output tokens: short words so that one generated token is one chunk of text.
_WORDS = (
    "the",
    "a",
    "of",
    "to",
    "and",
    "in",
    "is",
    "it",
    "that",
    "for",
    "on",
    "with",
    "as",
    "this",
    "be",
    "are",
    "by",
    "at",
    "from",
    "or",
    "an",
    "can",
    "will",
    "more",
    "GPU",
    "KV",
    "load",
    "time",
    "cost",
    "fast",
    "slow",
    "wait",
    "rate",
    "step",
    "data",
)


def _chunks(text: str) -> Iterable[str]:
    for word in text.split():
        for i in range(0, len(word), CHUNK):
            yield word[i : i + CHUNK]


def tokenize(text: str) -> list[int]:
    """Token ids of ``text`` (deterministic, process-independent)."""
    return [zlib.crc32(chunk.encode()) % VOCAB_SIZE for chunk in _chunks(text)]


def count_tokens(text: str) -> int:
    return sum(1 for _ in _chunks(text))


def chat_prompt(messages: Iterable[Mapping[str, object]]) -> str:
    """The text a chat template would produce: one ``role: content`` paragraph each.

    The first message (the system prompt, when there is one) comes first, so
    requests that share it share a token prefix.
    """
    parts: list[str] = []
    for msg in messages:
        role = str(msg.get("role", "user"))
        content = msg.get("content", "")
        if isinstance(content, list):
            # OpenAI content parts: keep the text ones
            content = " ".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping))
        parts.append(f"<|{role}|> {content}")
    parts.append("<|assistant|>")
    return "\n".join(parts)


def output_words(rng: random.Random) -> str:
    """One generated token's text (a leading space and a short word)."""
    return " " + rng.choice(_WORDS)
