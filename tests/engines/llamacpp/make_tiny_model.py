"""Write a tiny llama-architecture GGUF for the live llama-server tests.

Random weights (seeded, so every machine writes the same file), a byte-level
BPE vocabulary trained with ``tokenizers`` on the sentences below (written for
this file), stored with the ``gguf`` package that the llama-cpp-python sdist
vendors (``setup.sh`` puts it on ``PYTHONPATH``). The model talks nonsense; the
tests only need a server that tokenizes, prefills, decodes and counts.

Usage: PYTHONPATH=<gguf-py> python make_tiny_model.py OUT.gguf [--shape gpu]

``--shape gpu`` writes the ~0.7 B parameter model of the GPU runs instead
(bench/device/llamacpp_trace.py; shapes in shared/notes/gpu-llamacpp.md): the
same vocabulary, n_embd 2048, 16 layers, 16 heads, 4 KV heads, n_ff 5632,
context 16384, about 1.4 GB in F16. Only shapes matter for speed.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

VOCAB_SIZE = 400
N_EMBD = 64
N_HEAD = 4
N_HEAD_KV = 2
N_LAYER = 2
N_FF = 128
N_CTX = 4096
#: the GPU runs' shape (--shape gpu)
GPU_SHAPE = {
    "N_EMBD": 2048,
    "N_HEAD": 16,
    "N_HEAD_KV": 4,
    "N_LAYER": 16,
    "N_FF": 5632,
    "N_CTX": 16384,
}
BOS, EOS = "<s>", "</s>"

_SENTENCES = (
    "The agent reads the engine's counters every two seconds and keeps a window of them.",
    "A queue that grows faster than the batch drains is a capacity problem, not a bug.",
    "Prompt tokens that come from the cache cost no prefill; the ratio says how many did.",
    "Each slot holds one request; when every slot is busy the next request waits.",
    "Tokens per second fall when the batch is full and the memory bandwidth is spent.",
    "An alert fires when the rule's expression holds for the whole pending period.",
    "The weekly report lists the workers, their busiest hours and their slowest models.",
    "Restarted servers start their counters at zero; rates over a reset stay correct.",
    "Numbers 0 1 2 3 4 5 6 7 8 9 and punctuation , . ; : ! ? ( ) [ ] { } - _ / = + * % # @",
)


def training_text() -> list[str]:
    """Our sentences, with some variations so that merges of every length appear."""
    lines = list(_SENTENCES)
    for i, s in enumerate(_SENTENCES):
        lines.append(s.lower())
        lines.append(s.upper())
        lines.append(" ".join(reversed(s.split())) + f" {i}")
    return lines * 4


def train_tokenizer() -> tuple[list[str], list[str]]:
    """(tokens by id, merges "a b") of a byte-level BPE trained on our text."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=[BOS, EOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(training_text(), trainer=trainer)
    vocab = tok.get_vocab()
    tokens = [""] * len(vocab)
    for text, index in vocab.items():
        tokens[index] = text
    raw = json.loads(tok.to_str())["model"]["merges"]
    merges = [m if isinstance(m, str) else " ".join(m) for m in raw]
    return tokens, merges


def write_model(path: Path) -> None:
    import gguf  # from the sdist's gguf-py, see the module docstring

    tokens, merges = train_tokenizer()
    n_vocab = len(tokens)
    rng = np.random.default_rng(17)

    def weight(*shape: int) -> np.ndarray:
        # numpy shape is ggml's reversed: (rows = output features, columns = inputs)
        return (rng.standard_normal(shape) * 0.05).astype(np.float16)

    def norm(n: int) -> np.ndarray:
        return np.ones(n, dtype=np.float32)

    head_dim = N_EMBD // N_HEAD
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name("inferwatch-tiny")
    writer.add_context_length(N_CTX)
    writer.add_embedding_length(N_EMBD)
    writer.add_block_count(N_LAYER)
    writer.add_feed_forward_length(N_FF)
    writer.add_head_count(N_HEAD)
    writer.add_head_count_kv(N_HEAD_KV)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_dimension_count(head_dim)
    writer.add_vocab_size(n_vocab)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)

    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    special = {BOS, EOS}
    writer.add_token_types(
        [gguf.TokenType.CONTROL if t in special else gguf.TokenType.NORMAL for t in tokens]
    )
    writer.add_token_merges(merges)
    writer.add_bos_token_id(tokens.index(BOS))
    writer.add_eos_token_id(tokens.index(EOS))
    writer.add_add_bos_token(True)

    writer.add_tensor("token_embd.weight", weight(n_vocab, N_EMBD))
    writer.add_tensor("output_norm.weight", norm(N_EMBD))
    writer.add_tensor("output.weight", weight(n_vocab, N_EMBD))
    kv = N_HEAD_KV * head_dim
    for i in range(N_LAYER):
        p = f"blk.{i}."
        writer.add_tensor(p + "attn_norm.weight", norm(N_EMBD))
        writer.add_tensor(p + "attn_q.weight", weight(N_EMBD, N_EMBD))
        writer.add_tensor(p + "attn_k.weight", weight(kv, N_EMBD))
        writer.add_tensor(p + "attn_v.weight", weight(kv, N_EMBD))
        writer.add_tensor(p + "attn_output.weight", weight(N_EMBD, N_EMBD))
        writer.add_tensor(p + "ffn_norm.weight", norm(N_EMBD))
        writer.add_tensor(p + "ffn_gate.weight", weight(N_FF, N_EMBD))
        writer.add_tensor(p + "ffn_up.weight", weight(N_FF, N_EMBD))
        writer.add_tensor(p + "ffn_down.weight", weight(N_EMBD, N_FF))

    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def main(argv: list[str]) -> int:
    if len(argv) == 4 and argv[2:] == ["--shape", "gpu"]:
        globals().update(GPU_SHAPE)
    elif len(argv) != 2:
        print("usage: make_tiny_model.py OUT.gguf [--shape gpu]", file=sys.stderr)
        return 2
    write_model(Path(argv[1]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
