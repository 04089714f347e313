#!/usr/bin/env bash
# The app's Continue rate as a user sees it: a real window under Xvfb (drawn by Mesa's software
# renderer, as on a machine without a GPU), fresh settings, the embedded SmolLM2 on the example
# sentence (the prompt `attnviz bench --generate` uses), N tokens asked for, Continue pressed with
# the head view shown; the app logs (ATTNVIZ_GENERATION_LOG) when the frames drew each written
# token and when the final run was drawn. Beside it, in the same round, the library's rate with
# `attnviz bench --model smollm2 --generate N`. Needs: apt-get install xvfb xdotool.
#   scripts/bench-continue.sh [path/to/attnviz] [N] [ROUNDS]   (defaults: target/release/attnviz 32 3)
# VIEW=model|heatmap|stats measures with another view shown (its tab clicked before Continue).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${1:-target/release/attnviz}
N=${2:-32}
ROUNDS=${3:-3}
export DISPLAY=:95
export ATTNVIZ_MODEL=$PWD/assets/models/SmolLM2-135M-Instruct ATTNVIZ_GENERATION_LOG=1
for round in $(seq "$ROUNDS"); do
  APP_LOG=$(mktemp)
  (
    # shellcheck source=scripts/xvfb-app.sh
    source scripts/xvfb-app.sh
    sleep "${START_WAIT:-8}" # model load + first run
    case "${VIEW:-head}" in
      model) xdotool mousemove 403 76 click 1 ;;
      heatmap) xdotool mousemove 486 76 click 1 ;;
      stats) xdotool mousemove 676 76 click 1 ;;
    esac
    sleep 1
    # The token count: double-click the drag value to type into it.
    xdotool mousemove 1225 117 click --repeat 2 1
    sleep 0.3
    xdotool key ctrl+a
    xdotool type "$N"
    xdotool key Return
    sleep 1
    xdotool mousemove 1138 117 click 1
    # The pointer leaves the window's widgets; nothing else moves until the log line.
    xdotool mousemove 1300 840
    for _ in $(seq 600); do
      grep -q '^continue:' "$APP_LOG" && break
      sleep 0.1
    done
  )
  app=$(grep '^continue:' "$APP_LOG" || echo "continue: no line (see $APP_LOG)")
  if [ -n "${KEEP_LOG:-}" ]; then cp "$APP_LOG" "$KEEP_LOG"; fi
  rm -f "$APP_LOG"
  lib=$("$BIN" --model smollm2 bench --tokens 8 --runs 1 --generate "$N" | grep '^generated=')
  echo "round=$round view=${VIEW:-head} app: ${app#continue: }"
  echo "round=$round library: $lib"
done
