# Sourced by scripts/screenshots.sh and scripts/measure-cpu.sh: starts Xvfb on $DISPLAY and the app
# ($BIN, with the arguments in the array APP_ARGS if set) in a 1360×860 window with fresh settings,
# and stops both on exit. Sets APP (the app's pid) and WID (its window). Needs: apt-get install xvfb xdotool.
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
"$BIN" "${APP_ARGS[@]+"${APP_ARGS[@]}"}" >"${APP_LOG:-/tmp/attnviz-xvfb.log}" 2>&1 &
APP=$!
WID=$(xdotool search --sync --onlyvisible --name '^attnviz$' | head -1)
xdotool windowmove --sync "$WID" 0 0
xdotool windowsize --sync "$WID" 1360 860
xdotool windowfocus --sync "$WID"
