#!/usr/bin/env bash
# The app's Continue rate as a user sees it: a real window under Xvfb (drawn by Mesa's software
# renderer, as on a machine without a GPU), fresh settings, the embedded SmolLM2 on the example
# sentence (the prompt `attnviz bench --generate` uses), N tokens asked for, Continue pressed with
# the head view shown. The app logs (ATTNVIZ_GENERATION_LOG) when its frames drew the written
# tokens and the final run; /proc gives the CPU time per written token of the model's threads and
# of the rest of the app (UI thread, software renderer, derive thread). Beside it, in the same
# round, the library's rate: `attnviz bench --model smollm2 --generate N`.
# Needs: apt-get install xvfb xdotool.
#   scripts/bench-continue.sh [path/to/attnviz] [N] [ROUNDS]   (defaults: target/release/attnviz 32 3)
# VIEW=model|heatmap|stats measures with another view shown (its tab clicked before Continue).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${1:-target/release/attnviz}
N=${2:-32}
ROUNDS=${3:-3}
export DISPLAY=:95
export ATTNVIZ_MODEL=$PWD/assets/models/SmolLM2-135M-Instruct ATTNVIZ_GENERATION_LOG=1
# Per thread of the app: id, CPU ticks so far, and whether it is the model's.
cpu_ticks() {
  for task in /proc/"$APP"/task/*; do
    local comm kind
    comm=$(cat "$task/comm" 2>/dev/null) || continue
    kind=other
    case "$comm" in attnviz-inferen*) kind=model ;; esac
    awk -v id="${task##*/}" -v kind="$kind" '{ print id, $14 + $15, kind }' "$task/stat" 2>/dev/null || true
  done
}
for round in $(seq "$ROUNDS"); do
  # The previous round's display has gone.
  for _ in $(seq 50); do [ -e /tmp/.X95-lock ] || break; sleep 0.1; done
  APP_LOG=$(mktemp)
  (
    # shellcheck source=scripts/xvfb-app.sh
    source scripts/xvfb-app.sh
    sleep "${START_WAIT:-10}" # model load + first run
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
    cpu_ticks >"$APP_LOG.cpu0"
    xdotool mousemove 1138 117 click 1
    # The pointer rests on an empty part of the view (no widget, no tooltip) until the log line.
    xdotool mousemove 1040 800
    for _ in $(seq 600); do
      grep -q '^continue:' "$APP_LOG" && break
      sleep 0.1
    done
    cpu_ticks >"$APP_LOG.cpu1"
  )
  # CPU time the model's threads (the inference thread and its pool) and the rest (UI thread,
  # the software renderer's threads, the derive thread) spent from the click to the log line.
  cpu=$(awk -v hz="$(getconf CLK_TCK)" -v n="$N" '
    FNR == NR { before[$1] = $2 + 0; next }
    { d = $2 - before[$1]; if ($3 == "model") m += d; else u += d }
    END { printf "model_cpu_ms_per_token=%.1f other_cpu_ms_per_token=%.1f", m * 1000 / hz / n, u * 1000 / hz / n }
  ' "$APP_LOG.cpu0" "$APP_LOG.cpu1")
  rm -f "$APP_LOG.cpu0" "$APP_LOG.cpu1"
  app=$(grep '^continue:' "$APP_LOG" || echo "continue: no line (the app's output: ${KEEP_LOG:-set KEEP_LOG=FILE})")
  if [ -n "${KEEP_LOG:-}" ]; then cp "$APP_LOG" "$KEEP_LOG"; fi
  rm -f "$APP_LOG"
  lib=$("$BIN" --model smollm2 bench --tokens 8 --runs 1 --generate "$N" | grep '^generated=')
  echo "round=$round view=${VIEW:-head} app: ${app#continue: } $cpu"
  echo "round=$round library: $lib"
done
