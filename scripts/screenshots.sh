#!/usr/bin/env bash
# Refreshes screenshots/ from the real app in a virtual X display: starts Xvfb, launches attnviz with
# fresh settings, types with xdotool and captures the window with ImageMagick's `import`.
# Needs: apt-get install xvfb xdotool imagemagick mesa-vulkan-drivers
# Usage: scripts/screenshots.sh [path/to/attnviz]   (default: target/release/attnviz, else target/debug)
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
cleanup() { [ -n "$APP" ] && kill "$APP" 2>/dev/null; kill "$XVFB" 2>/dev/null; }
trap cleanup EXIT
sleep 1
# Fresh settings: eframe stores them under $HOME/.local/share/attnviz.
export HOME
HOME=$(mktemp -d)
export XDG_DATA_HOME="$HOME/.local/share"
"$BIN" --text "The animal didn't cross the street because it was too tired" >/tmp/attnviz-screens.log 2>&1 &
APP=$!
WID=$(xdotool search --sync --onlyvisible --name '^attnviz$' | head -1)
xdotool windowmove --sync "$WID" 0 0
xdotool windowsize --sync "$WID" 1360 860
xdotool windowfocus --sync "$WID"
sleep 4  # model load + first run
shot() { sleep "${2:-1.5}"; import -window root "$OUT/$1.png"; echo "wrote $OUT/$1.png"; }

# Typing goes to the focused sentence box.
xdotool type --delay 40 "."
shot head-view-typed 1
# Hover / pin: click the query token "it" (row 11 of the head view).
source scripts/screenshot_coords.sh
xdotool mousemove "$QUERY_X" "$((ROW0_Y + 11 * ROW_H))" click 1
shot head-view
xdotool key Escape
# Model view, heatmap view.
xdotool mousemove "$TAB_MODEL_X" "$TAB_Y" click 1
shot model-view
xdotool mousemove "$TAB_HEATMAP_X" "$TAB_Y" click 1
shot heatmap
# Sentence pair in the head view, A→B filter.
xdotool mousemove "$TAB_HEAD_X" "$TAB_Y" click 1
xdotool mousemove "$PAIR_CHECK_X" "$PAIR_CHECK_Y" click 1
sleep 0.5
xdotool mousemove "$PAIR_TEXT_X" "$PAIR_CHECK_Y" click 1
xdotool type --delay 30 "It was exhausted after a long day"
shot head-view-pair 2
