#!/bin/sh
# A training step of the lab's default induction model (2 layers × 4 heads, d_model 64,
# attention-only, 32 + 32 tokens, batch 32, AdamW 1e-3) in attnviz and in the PyTorch peer,
# alternated, with 2 threads and then 1, three rounds, with the load before each round. Each line is
# the median ms per step of its run. The peer's thread count is pinned by replacing
# torch.set_num_threads before its script runs (the script itself asks for 2).
#   scripts/bench-train.sh            (STEPS=200, PYTHON=/tmp/torch-venv/bin/python,
#                                      PEER=../shared/peer/torch_train.py, ROUNDS=3)
set -eu
cd "$(dirname "$0")/.."
steps=${STEPS:-200}
python=${PYTHON:-/tmp/torch-venv/bin/python}
peer=${PEER:-../shared/peer/torch_train.py}
cargo build --release --quiet
pinned='import os, sys, torch
n = int(os.environ["PEER_THREADS"]); set_threads = torch.set_num_threads
torch.set_num_threads = lambda _: set_threads(n)
sys.argv = sys.argv[1:]
exec(compile(open(sys.argv[0]).read(), sys.argv[0], "exec"))'
for round in $(seq "${ROUNDS:-3}"); do
    echo "round $round: $(uptime | sed 's/.*load/load/')"
    for threads in 2 1; do
        ms=$(RAYON_NUM_THREADS=$threads ./target/release/attnviz bench --mode train --steps "$steps" | sed -n 1p)
        echo "attnviz $threads threads: $ms"
        ms=$(PEER_THREADS=$threads "$python" -c "$pinned" "$peer" --steps "$steps" --eval "$steps" | tail -n 1)
        echo "pytorch $threads threads: $ms"
    done
done
