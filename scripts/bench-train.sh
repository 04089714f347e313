#!/bin/sh
# A training step of the lab's default induction model (2 layers × 4 heads, d_model 64,
# attention-only, 32 + 32 tokens, batch 32, AdamW 1e-3) in attnviz and in the PyTorch peer, back to
# back, three times, with the load before each pair. Both print the median ms per step.
#   scripts/bench-train.sh            (STEPS=200, PYTHON=/tmp/torch-venv/bin/python,
#                                      PEER=../shared/peer/torch_train.py)
set -eu
cd "$(dirname "$0")/.."
steps=${STEPS:-200}
python=${PYTHON:-/tmp/torch-venv/bin/python}
peer=${PEER:-../shared/peer/torch_train.py}
cargo build --release --quiet
for round in 1 2 3; do
    echo "round $round: $(uptime | sed 's/.*load/load/')"
    ./target/release/attnviz bench --mode train --steps "$steps"
    echo "pytorch: $("$python" "$peer" --steps "$steps" --eval "$steps" | tail -n 1)"
done
