#!/usr/bin/env bash
# A keystroke as a user sees it (issue 27): the real app under Xvfb (Mesa's software renderer, as on
# a machine without a GPU), fresh settings, the embedded SmolLM2 on a text of about N tokens (the
# example sentence repeated), then K keystrokes typed at its end, one every second. The app logs
# (ATTNVIZ_TYPING_LOG) for each: the worker's tokenizer + model time (run_ms), the time from the
# frame that took the key to the first frame that drew the new run (drawn_ms) and to the first
# frame with nothing left to derive — every view's data ready (settled_ms). Beside it, the
# library's `attnviz bench --mode typing` at the same length. The first line of a round is the
# opening run (the whole text, after the model loads).
# Needs: apt-get install xvfb xdotool.
#   scripts/bench-typing.sh [path/to/attnviz] [N] [K] [ROUNDS]   (defaults: target/release/attnviz 1000 5 2)
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${1:-target/release/attnviz}
N=${2:-1000}
K=${3:-5}
ROUNDS=${4:-2}
export DISPLAY=${BENCH_DISPLAY:-:96}
export ATTNVIZ_TYPING_LOG=1
sentence="The animal didn't cross the street because it was too tired."
text=$(awk -v n="$N" -v s="$sentence" 'BEGIN { r = int(n / 14); if (r < 1) r = 1; for (i = 0; i < r; i++) printf "%s%s", (i ? " " : ""), s }')
APP_ARGS=(--model smollm2 --text "$text")
for round in $(seq "$ROUNDS"); do
  for _ in $(seq 50); do [ -e "/tmp/.X${DISPLAY#:}-lock" ] || break; sleep 0.1; done
  APP_LOG=$(mktemp)
  (
    # shellcheck source=scripts/xvfb-app.sh
    source scripts/xvfb-app.sh
    # The first run (model load and the whole text).
    for _ in $(seq 600); do grep -q '^typing:' "$APP_LOG" && break; sleep 0.1; done
    sleep 1
    # The text box has focus at launch: the end of the text, then one key at a time.
    xdotool key ctrl+End
    sleep 1
    for k in $(seq "$K"); do
      xdotool key x
      for _ in $(seq 300); do [ "$(grep -c '^typing:' "$APP_LOG")" -gt "$k" ] && break; sleep 0.05; done
      sleep 1
    done
  )
  grep '^typing:' "$APP_LOG" | awk -v r="$round" '{ sub(/^typing: /, ""); print "round=" r " app " (NR == 1 ? "opening: " : "key: ") $0 }'
  tokens=$(grep '^typing:' "$APP_LOG" | tail -1 | grep -o 'tokens=[0-9]*' | cut -d= -f2)
  rm -f "$APP_LOG"
  echo "round=$round library: $("$BIN" --model smollm2 bench --mode typing --tokens "$tokens" --runs 5)"
done
