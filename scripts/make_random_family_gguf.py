#!/usr/bin/env python3
"""Writes a GGUF of random quantised blocks in the shape of a released 2025 model, to measure loading
and recording one without downloading it (docs/performance.md, "GGUF families"):

  gemma3-1b   Gemma 3 1B: 26 blocks, 1152 wide, 4 heads of 256, 1 key/value head, MLP 6912,
              262,144 tokens, sliding window 512 on five layers of six.
  qwen3-moe   Qwen3-30B-A3B's layer shape, 8 blocks: 2048 wide, 32 heads of 128, 4 key/value
              heads, 32 experts of 768 (4 chosen; --used 32 runs every expert: the dense
              computation of the same weights), 151,936 tokens.

Matrices are Q4_K where their rows are whole 256-value blocks, else Q5_0 (as llama-quantize falls
back; Gemma 3 1B's 1152-wide rows are not), with finite random scales; norms random around 1, Gemma's
stored as 1 + weight as llama.cpp's converter writes them. The tokenizer metadata is copied from
tests/fixtures/models/tiny-llama-gguf/tiny-llama.F32.gguf (768 tokens; the rest of the vocabulary is
never produced). Usage, from the repository root:

    /tmp/torch-venv/bin/python scripts/make_random_family_gguf.py gemma3-1b /tmp/gemma3-1b.Q4_K.gguf
    /tmp/torch-venv/bin/python scripts/make_random_family_gguf.py qwen3-moe /tmp/qwen3-moe.Q4_K.gguf [--used 32]
"""

import argparse
import os
import sys

import gguf
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_random_llama_gguf import TOKENIZER_FROM, random_blocks  # noqa: E402

T = gguf.GGMLQuantizationType


def matrix(rng, rows: int, cols: int, experts: int = 0) -> tuple:
    """Random blocks of Q4_K (rows of whole 256-value blocks) or Q5_0, stacked for experts."""
    qtype = T.Q4_K if cols % 256 == 0 else T.Q5_0
    if experts:
        data = np.stack([random_blocks(rng, qtype, rows, cols) for _ in range(experts)])
    else:
        data = random_blocks(rng, qtype, rows, cols)
    return data, qtype


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("shape", choices=["gemma3-1b", "qwen3-moe"])
    parser.add_argument("out")
    parser.add_argument("--used", type=int, default=4, help="qwen3-moe: experts chosen per token (default 4)")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    if args.shape == "gemma3-1b":
        arch, layers, hidden, heads, kv, head_dim, ffn, vocab = "gemma3", 26, 1152, 4, 1, 256, 6912, 262144
    else:
        arch, layers, hidden, heads, kv, head_dim, ffn, vocab = "qwen3moe", 8, 2048, 32, 4, 128, 768, 151936
    experts = 32 if arch == "qwen3moe" else 0
    reader = gguf.GGUFReader(TOKENIZER_FROM)
    writer = gguf.GGUFWriter(args.out, arch=arch)
    for key, field in reader.fields.items():
        if key.startswith(("GGUF.", "llama.")) or key in ("general.architecture", "general.name"):
            continue
        sub = field.types[1] if field.types[0] == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(key, field.contents(), field.types[0], sub_type=sub)
    writer.add_uint32(f"{arch}.block_count", layers)
    writer.add_uint32(f"{arch}.embedding_length", hidden)
    writer.add_uint32(f"{arch}.feed_forward_length", ffn)
    writer.add_uint32(f"{arch}.attention.head_count", heads)
    writer.add_uint32(f"{arch}.attention.head_count_kv", kv)
    writer.add_uint32(f"{arch}.attention.key_length", head_dim)
    writer.add_uint32(f"{arch}.attention.value_length", head_dim)
    writer.add_uint32(f"{arch}.vocab_size", vocab)
    writer.add_uint32(f"{arch}.context_length", 32768)
    writer.add_float32(f"{arch}.attention.layer_norm_rms_epsilon", 1e-6)
    if arch == "gemma3":
        writer.add_float32(f"{arch}.rope.freq_base", 1_000_000.0)
        writer.add_uint32(f"{arch}.attention.sliding_window", 512)
    else:
        writer.add_float32(f"{arch}.rope.freq_base", 1_000_000.0)
        writer.add_uint32(f"{arch}.expert_count", experts)
        writer.add_uint32(f"{arch}.expert_used_count", args.used)
        writer.add_uint32(f"{arch}.expert_feed_forward_length", ffn)
    writer.add_string("general.name", f"random {args.shape} Q4_K")

    def add(name: str, shape: tuple, experts: int = 0) -> None:
        data, qtype = matrix(rng, *shape, experts=experts)
        writer.add_tensor(name, data, raw_dtype=qtype)

    def norm(name: str, n: int) -> None:
        w = rng.uniform(0.5, 1.5, size=n).astype(np.float32)
        writer.add_tensor(name, w + 1 if arch == "gemma3" else w)

    add("token_embd.weight", (vocab, hidden))
    q, k = heads * head_dim, kv * head_dim
    for l in range(layers):
        b = f"blk.{l}"
        add(f"{b}.attn_q.weight", (q, hidden))
        add(f"{b}.attn_k.weight", (k, hidden))
        add(f"{b}.attn_v.weight", (k, hidden))
        add(f"{b}.attn_output.weight", (hidden, q))
        norm(f"{b}.attn_norm.weight", hidden)
        norm(f"{b}.ffn_norm.weight", hidden)
        norm(f"{b}.attn_q_norm.weight", head_dim)
        norm(f"{b}.attn_k_norm.weight", head_dim)
        if experts:
            writer.add_tensor(f"{b}.ffn_gate_inp.weight", rng.normal(0, 0.02, size=(experts, hidden)).astype(np.float32))
            add(f"{b}.ffn_gate_exps.weight", (ffn, hidden), experts)
            add(f"{b}.ffn_up_exps.weight", (ffn, hidden), experts)
            add(f"{b}.ffn_down_exps.weight", (hidden, ffn), experts)
        else:
            add(f"{b}.ffn_gate.weight", (ffn, hidden))
            add(f"{b}.ffn_up.weight", (ffn, hidden))
            add(f"{b}.ffn_down.weight", (hidden, ffn))
            norm(f"{b}.post_attention_norm.weight", hidden)
            norm(f"{b}.post_ffw_norm.weight", hidden)
    norm("output_norm.weight", hidden)
    if experts:
        add("output.weight", (vocab, hidden))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    print(f"{args.out}: {os.path.getsize(args.out)} bytes")


if __name__ == "__main__":
    main()
