#!/usr/bin/env python3
"""Writes a Llama-shaped GGUF of random quantised blocks, to measure loading and recording a model
of a real size (the default is Llama-3.2-1B's shape: 16 blocks, 2048 wide, 32 heads of 64, 8
key/value heads, MLP 8192, 128,256 tokens, tied embeddings) without downloading one.

The matrices are random bytes in the chosen block type (Q4_K by default; Q5_K, Q6_K, Q8_0, Q4_0,
Q4_1, Q5_0, Q5_1 too) with finite scales — a random model stored as that type, as gguf-py writes
but cannot quantise the K types — its norms random around 1. The tokenizer metadata is copied from
tests/fixtures/models/tiny-llama-gguf/tiny-llama.F32.gguf (768 tokens; the ids a text gives are all
below that, the rest of the vocabulary is never produced). Usage, from the repository root:

    /tmp/torch-venv/bin/python scripts/make_random_llama_gguf.py /tmp/llama-1b.Q4_K.gguf [--type Q4_K]
"""

import argparse
import os

import gguf
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
TOKENIZER_FROM = os.path.join(HERE, "..", "tests", "fixtures", "models", "tiny-llama-gguf", "tiny-llama.F32.gguf")


def random_blocks(rng, qtype, rows: int, cols: int) -> np.ndarray:
    """rows × cols values as random blocks of qtype, every f16 scale finite and small."""
    T = gguf.GGMLQuantizationType
    size, block_bytes = gguf.GGML_QUANT_SIZES[qtype]
    raw = rng.integers(0, 256, size=(rows, cols // size, block_bytes), dtype=np.uint8)
    at = {T.Q6_K: [208], T.Q4_K: [0, 2], T.Q5_K: [0, 2], T.Q4_1: [0, 2], T.Q5_1: [0, 2]}.get(qtype, [0])
    scale = 2e-3 if qtype == T.Q6_K else 1e-2
    for a in at:
        d = (rng.uniform(0.2, 1.0, size=raw.shape[:2]) * scale).astype(np.float16)
        raw[:, :, a:a + 2] = d.view(np.uint8).reshape(rows, cols // size, 2)
    return raw.reshape(rows, -1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out")
    parser.add_argument("--type", default="Q4_K", help="block type of every matrix (default Q4_K)")
    parser.add_argument("--layers", type=int, default=16)
    parser.add_argument("--hidden", type=int, default=2048)
    parser.add_argument("--heads", type=int, default=32)
    parser.add_argument("--kv-heads", type=int, default=8)
    parser.add_argument("--ffn", type=int, default=8192)
    parser.add_argument("--vocab", type=int, default=128256)
    parser.add_argument("--context", type=int, default=4096)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    qtype = gguf.GGMLQuantizationType[args.type]
    rng = np.random.default_rng(args.seed)
    head_dim = args.hidden // args.heads
    reader = gguf.GGUFReader(TOKENIZER_FROM)
    writer = gguf.GGUFWriter(args.out, arch="llama")
    patch = {"llama.block_count": args.layers, "llama.embedding_length": args.hidden,
             "llama.feed_forward_length": args.ffn, "llama.attention.head_count": args.heads,
             "llama.attention.head_count_kv": args.kv_heads, "llama.attention.key_length": head_dim,
             "llama.attention.value_length": head_dim, "llama.rope.dimension_count": head_dim,
             "llama.vocab_size": args.vocab, "llama.context_length": args.context,
             "general.name": f"random Llama {args.layers}x{args.hidden} {args.type}"}
    for key, field in reader.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":
            continue
        sub = field.types[1] if field.types[0] == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(key, patch.get(key, field.contents()), field.types[0], sub_type=sub)
    for key in ["llama.vocab_size"]:
        if key not in reader.fields:
            writer.add_uint32(key, patch[key])
    h, kv = args.hidden, args.kv_heads * head_dim
    writer.add_tensor("token_embd.weight", random_blocks(rng, qtype, args.vocab, h), raw_dtype=qtype)
    for layer in range(args.layers):
        for name, rows, cols in [("attn_q", h, h), ("attn_k", kv, h), ("attn_v", kv, h), ("attn_output", h, h),
                                 ("ffn_gate", args.ffn, h), ("ffn_up", args.ffn, h), ("ffn_down", h, args.ffn)]:
            writer.add_tensor(f"blk.{layer}.{name}.weight", random_blocks(rng, qtype, rows, cols), raw_dtype=qtype)
        for name in ["attn_norm", "ffn_norm"]:
            writer.add_tensor(f"blk.{layer}.{name}.weight", rng.uniform(0.5, 1.5, size=h).astype(np.float32))
    writer.add_tensor("output_norm.weight", rng.uniform(0.5, 1.5, size=h).astype(np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    print(f"{args.out}: {os.path.getsize(args.out)} bytes")


if __name__ == "__main__":
    main()
