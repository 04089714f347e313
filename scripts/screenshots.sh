#!/usr/bin/env bash
# Refreshes screenshots/ from the real app in a virtual X display: starts Xvfb, launches attnviz with
# fresh settings, clicks and types with xdotool and captures the screen with ImageMagick's `import`.
# Needs: apt-get install xvfb xdotool imagemagick mesa-vulkan-drivers
# Usage: scripts/screenshots.sh [path/to/attnviz]   (default: target/release/attnviz, else a debug build)
# The click positions below are for the 1360×860 window this script opens; if a layout change moves
# a widget, update them (look at the PNGs: every one should show what its name says).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${1:-}
if [ -z "$BIN" ]; then
  if [ -x target/release/attnviz ]; then BIN=target/release/attnviz; else cargo build; BIN=target/debug/attnviz; fi
fi
OUT=screenshots
mkdir -p "$OUT"
export DISPLAY=:97
Xvfb "$DISPLAY" -screen 0 1360x860x24 -nolisten tcp >/dev/null 2>&1 &
XVFB=$!
APP=""
cleanup() { if [ -n "$APP" ]; then kill "$APP" 2>/dev/null || true; fi; kill "$XVFB" 2>/dev/null || true; }
trap cleanup EXIT
sleep 1
# Fresh settings (eframe keeps them under $XDG_DATA_HOME/attnviz).
export HOME XDG_DATA_HOME
HOME=$(mktemp -d)
XDG_DATA_HOME="$HOME/.local/share"
"$BIN" >/tmp/attnviz-screenshots.log 2>&1 &
APP=$!
WID=$(xdotool search --sync --onlyvisible --name '^attnviz$' | head -1)
xdotool windowmove --sync "$WID" 0 0
xdotool windowsize --sync "$WID" 1360 860
xdotool windowfocus --sync "$WID"
sleep 4 # model load + first run
click() { xdotool mousemove "$1" "$2" click 1; sleep "${3:-0.6}"; }
shot() { sleep "${2:-1}"; import -window root "$OUT/$1.png"; echo "wrote $OUT/$1.png"; }

# The sentence box has focus at launch: type into it, the views follow.
xdotool key --delay 40 End BackSpace
xdotool type --delay 40 " and hungry."
sleep 1.5
# Head view, layer 4: pin the query token "it" (row 10 of the head view).
click 174 274
click 405 348
shot head-view
xdotool key Escape
# Model view; a click on layer 3, head 4 opens it in the heatmap view.
click 403 76
shot model-view
click 693 428
xdotool mousemove 1300 800
shot heatmap
# A sentence pair in the head view.
click 315 76
click 15 40
click 700 40
xdotool type --delay 30 "It was exhausted after a long day."
shot head-view-pair 2
# The export dialog.
click 590 76
shot export-dialog
xdotool key Escape
# Light theme.
click 147 416
click 1300 800
shot head-view-light
