#!/usr/bin/env bash
# Long-context benchmark (issue 16): every layer × head's attention of the embedded SmolLM2 produced
# once, attnviz streaming layer by layer (`bench --mode layers`) beside the PyTorch peer
# (output_attentions=True) on the same GGUF, alternately in the same session (ROUNDS rounds, each
# cell the range of the rounds' medians), each under /usr/bin/time for its peak RSS.
# Usage: scripts/bench-long.sh [SIZES] [PYTHON]
#   SIZES: comma-separated token counts (default 128,512,2048); PYTHON: a venv with torch +
#   transformers (default /tmp/torch-venv/bin/python; make one with ../shared/peer/make_torch_venv.sh).
#   ATTNVIZ_BIN: the binary (default target/release/attnviz); ROUNDS (default 2); MODE (default layers).
set -euo pipefail
cd "$(dirname "$0")/.."
sizes=${1:-128,512,2048}
python=${2:-/tmp/torch-venv/bin/python}
bin=${ATTNVIZ_BIN:-target/release/attnviz}
rounds=${ROUNDS:-2}
mode=${MODE:-layers}
gguf=assets/models/SmolLM2-135M-Instruct/SmolLM2-135M-Instruct.Q4_1.gguf
peer=${PEER:-../shared/peer/torch_forward.py}
runs_for() { if [ "$1" -le 128 ]; then echo 10; elif [ "$1" -le 512 ]; then echo 3; else echo 1; fi; }
range() { sort -g | awk 'NR == 1 { lo = $1 } { hi = $1 } END { if (lo == hi) printf "%.0f", lo; else printf "%.0f – %.0f", lo, hi }'; }
printf "| tokens | attnviz %s (ms) | PyTorch (ms) | attnviz / PyTorch | attnviz peak RSS (GiB) | PyTorch peak RSS (GiB) |\n" "$mode"
printf "|---:|---:|---:|---:|---:|---:|\n"
for n in ${sizes//,/ }; do
  runs=$(runs_for "$n")
  a_ms=(); p_ms=(); ratios=(); a_kb=0; p_kb=0
  for _ in $(seq "$rounds"); do
    a=$( { /usr/bin/time -f "rss_kb=%M" "$bin" --model smollm2 bench --tokens "$n" --runs "$runs" --generate 0 --mode "$mode"; } 2>&1 )
    p=$( { /usr/bin/time -f "rss_kb=%M" "$python" "$peer" "$gguf" "$n" "$runs"; } 2>&1 )
    am=$(grep -o 'median_ms=[0-9.]*' <<<"$a" | cut -d= -f2)
    pm=$(grep -E "^$n " <<<"$p" | awk '{print $2}')
    a_ms+=("$am"); p_ms+=("$pm"); ratios+=("$(awk -v a="$am" -v p="$pm" 'BEGIN { printf "%.2f", a / p }')")
    a_kb=$(grep -o 'rss_kb=[0-9]*' <<<"$a" | cut -d= -f2)
    p_kb=$(grep -o 'rss_kb=[0-9]*' <<<"$p" | cut -d= -f2)
  done
  r=$(printf "%s\n" "${ratios[@]}" | sort -g | awk 'NR == 1 { lo = $1 } { hi = $1 } END { if (lo == hi) print lo; else print lo " – " hi }')
  printf "| %d | %s | %s | %s | %.2f | %.2f |\n" "$n" "$(printf "%s\n" "${a_ms[@]}" | range)" \
    "$(printf "%s\n" "${p_ms[@]}" | range)" "$r" "$(awk -v k="$a_kb" 'BEGIN { print k / 1048576 }')" \
    "$(awk -v k="$p_kb" 'BEGIN { print k / 1048576 }')"
done
