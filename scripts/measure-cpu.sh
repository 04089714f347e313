#!/usr/bin/env bash
# Measures the app's CPU use the way a user without a GPU meets it: a real window under Xvfb
# (egui then draws through Mesa's software renderer), fresh settings, a sentence typed, then
#   idle: CPU seconds per second over 10 s with no input at all,
#   moves: CPU milliseconds per mouse move over the head view, two moves a second.
# Needs: apt-get install xvfb xdotool. Usage:
#   scripts/measure-cpu.sh [path/to/attnviz] [TEXT]   (default: target/release/attnviz, the example sentence)
# VIEW=model|heatmap|pe|stats|lens|dla|graph measures another tab (its tab is clicked after typing;
# the last three need a model with a head: ATTNVIZ_MODEL=smollm2). VIEW=lab opens the training lab
# from the playground, trains the default induction run to its end (LAB_WAIT seconds, 90), then
# measures the head view of the trained network beside the lab's panel (moves: MOVE_X=397
# MOVE_Y0=263 MOVE_DY=18 hit its query labels).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${1:-target/release/attnviz}
TEXT=${2:-}
export DISPLAY=:96
APP_LOG=/tmp/attnviz-measure.log
# shellcheck source=scripts/xvfb-app.sh
source scripts/xvfb-app.sh
sleep 4
ticks() { awk '{print $14 + $15}' "/proc/$APP/stat"; }
hz=$(getconf CLK_TCK)
if [ -n "$TEXT" ]; then
  xdotool key ctrl+a
  xdotool type --delay 5 "$TEXT"
else
  xdotool type --delay 40 " Typed."
fi
sleep 3
case "${VIEW:-head}" in
  model) xdotool mousemove 403 76 click 1 ;;
  heatmap) xdotool mousemove 486 76 click 1 ;;
  stats) xdotool mousemove 676 76 click 1 ;;
  pe) xdotool mousemove 978 76 click 1 ;;
  lens) xdotool mousemove 314 99 click 1 ;;
  dla) xdotool mousemove 413 99 click 1 ;;
  graph) xdotool mousemove 540 99 click 1 ;;
  lab)
    xdotool mousemove 48 117 click 1; sleep 1
    xdotool mousemove 78 539 click 1; sleep 2
    xdotool mousemove 1067 498 click 1
    sleep "${LAB_WAIT:-90}" ;;
esac
sleep 3
xdotool mousemove 1300 840
sleep 2
t0=$(ticks)
sleep 10
t1=$(ticks)
idle=$(awk -v a="$t0" -v b="$t1" -v hz="$hz" 'BEGIN { printf "%.3f", (b - a) / hz / 10 }')
# Mouse moves over the token labels of the head view (query column), two a second: x, the y of
# the row above the first one moved to, and the row height (MOVE_X, MOVE_Y0, MOVE_DY override them
# for another layout; the defaults hit the query labels of this version at 1360×860).
MOVE_X=${MOVE_X:-400}
MOVE_Y0=${MOVE_Y0:-216}
MOVE_DY=${MOVE_DY:-31}
t0=$(ticks)
moves=20
for i in $(seq $moves); do
  xdotool mousemove $((MOVE_X + (i % 2) * 3)) $((MOVE_Y0 + (i % 8) * MOVE_DY))
  sleep 0.5
done
t1=$(ticks)
per_move=$(awk -v a="$t0" -v b="$t1" -v hz="$hz" -v m="$moves" 'BEGIN { printf "%.1f", (b - a) / hz / m * 1000 }')
sleep 2
t0=$(ticks)
sleep 5
t1=$(ticks)
after=$(awk -v a="$t0" -v b="$t1" -v hz="$hz" 'BEGIN { printf "%.3f", (b - a) / hz / 5 }')
echo "view=${VIEW:-head} idle_cpu_s_per_s=$idle cpu_ms_per_move=$per_move idle_after_moves_cpu_s_per_s=$after"
