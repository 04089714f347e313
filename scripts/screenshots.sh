#!/usr/bin/env bash
# Refreshes screenshots/ from the real app in a virtual X display: starts Xvfb, launches attnviz with
# fresh settings, clicks and types with xdotool and captures the screen with ImageMagick's `import`.
# Needs: apt-get install xvfb xdotool imagemagick mesa-vulkan-drivers
# Usage: scripts/screenshots.sh [path/to/attnviz]   (default: target/release/attnviz, else a debug build)
# Env: SHOTS_DISPLAY (the Xvfb display, default :97), APP_LOG, PATCH_WAIT, TRAIN_WAIT, EXPERIMENT_WAIT.
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
# SHOTS_DISPLAY picks the virtual display (another Xvfb may already use :97).
export DISPLAY=${SHOTS_DISPLAY:-:97}
APP_LOG=${APP_LOG:-/tmp/attnviz-screenshots.log}
# shellcheck source=scripts/xvfb-app.sh
source scripts/xvfb-app.sh
sleep 4 # model load + first run
# Under Xvfb without a window manager, eframe draws a frame only when an input event arrives (its
# own repaint requests wait), so results of the inference thread show after the next event: nudge
# the pointer a few times after each click and before each screenshot.
nudge() { for _ in $(seq "${1:-3}"); do xdotool mousemove_relative 1 0; sleep 0.15; xdotool mousemove_relative -- -1 0; sleep 0.15; done; }
click() { xdotool mousemove "$1" "$2"; sleep 0.2; xdotool click 1; nudge 2; sleep "${3:-0.3}"; }
shot() { sleep "${2:-1}"; nudge 4; import -window root "$OUT/$1.png"; echo "wrote $OUT/$1.png"; }
# Restarts the app with these arguments and fresh settings (what the earlier shots left behind, such
# as a ticked Sentence B, is not carried over), same window place and size.
relaunch() {
  kill "$APP" 2>/dev/null || true
  sleep 1
  HOME=$(mktemp -d)
  XDG_DATA_HOME="$HOME/.local/share"
  "$BIN" "$@" >>"$APP_LOG" 2>&1 &
  APP=$!
  WID=$(xdotool search --sync --onlyvisible --name '^attnviz$' | head -1)
  xdotool windowmove --sync "$WID" 0 0
  xdotool windowsize --sync "$WID" 1360 860
  xdotool windowfocus --sync "$WID"
}

# The sentence box has focus at launch: type into it, the views follow.
xdotool key --delay 40 End BackSpace
xdotool type --delay 40 " and hungry."
sleep 1.5
# Head view, layer 4: pin the query token "it" (row 10 of the head view, which fills the window).
click 173 501
click 430 557
shot head-view
# Why? The pinned query in the neuron view, head 4.
click 643 200
click 660 154
xdotool mousemove 1300 800
shot neuron-view
xdotool key Escape
# Model view; a click on layer 3, head 4 opens it in the heatmap view.
click 403 76
shot model-view
click 693 451
# (Fit, the default: the whole figure in the room.)
xdotool mousemove 1300 800
shot heatmap
# Head statistics (entropy), rollout through layer 3, the comparison with another sentence.
click 676 76
xdotool mousemove 1300 800
shot head-stats
click 781 76
xdotool mousemove 1300 800
shot rollout
# (Compare fits A and B next to each other in the width.)
click 871 76
xdotool mousemove 1300 800
shot compare 2
# A sentence pair in the head view.
click 315 76
click 15 40
click 700 40
xdotool type --delay 30 "It was exhausted after a long day."
shot head-view-pair 2
# The export dialog.
click 461 99
shot export-dialog
xdotool key Escape
# Positional encodings: the sinusoidal encoding, PE·PE, line plots; then the learned table below.
click 978 76
xdotool mousemove 1300 800
shot positional-encoding
xdotool mousemove 900 500
for _ in $(seq 12); do xdotool click 5; done
xdotool mousemove 1250 600
shot positional-encoding-learned
# An intervention on the pretrained model: ablate layer 2, head 4 (all heads shown); the banner
# says so and layer 3 changes.
click 316 76
click 67 530
click 22 451 1.5
click 119 716
xdotool mousemove 1300 800
shot intervention 2
# Back to the faithful model (the side panel's button), interventions folded.
click 94 805 1.5
click 22 451 1.5
# The playground: sharper random weights (init std 0.5), a causal mask, in the model view.
click 48 117 2
click 15 478 1
click 112 427 1
xdotool key End BackSpace BackSpace BackSpace
xdotool type --delay 60 "0.5"
sleep 1
click 403 76
xdotool mousemove 1300 800
shot playground 2
# Light theme (back on the pretrained model).
click 97 94 1.5
click 316 76
click 147 646
click 1300 800
shot head-view-light
# A GPT-2-style model (the tiny random test fixture): causal, its masked triangle drawn as masked;
# then the same with its byte-level pieces merged into words.
click 15 40
click 90 261
xdotool key ctrl+a
xdotool type --delay 20 "$PWD/tests/fixtures/models/tiny-gpt2"
click 208 261 3
click 486 76
xdotool mousemove 1300 800
shot gpt2 2
# (A language model gets the "Continue the text" panel on the right: the Words toggle wraps to the
# second row of the view bar.)
click 716 99
xdotool mousemove 1300 800
shot words
# A DeBERTa-v3 (the tiny random test fixture, pieces again): its neuron view shows the
# content→position and position→content terms each score sums, beside the score. (With the short
# name "tiny-gpt2" the side panel's source buttons fit on one line: the path box is 24 px higher.)
click 716 99
click 90 237
xdotool key ctrl+a
xdotool type --delay 20 "$PWD/tests/fixtures/models/tiny-deberta-v3"
click 208 237 3
click 573 76
xdotool mousemove 1300 800
shot neuron-deberta 2

# SmolLM2 writing: the embedded language model continues a prompt (streamed, written tokens ✎),
# then a step back to one written token: its lines pinned in the head view, its candidates as bars.
relaunch --model smollm2 --text "The capital of France is"
sleep 6
nudge 4
click 316 76
click 1140 111 10
xdotool mousemove 1330 820
shot smollm2-continue 2
for _ in $(seq 15); do click 1110 298 0.2; done
xdotool mousemove 1330 820
shot smollm2-step 1

# Steering: the Steer panel under Continue ticked with its defaults (layer 10, scale 1, "Dogs are
# wonderful" − "Dogs are terrible"; the panel widens), then Continue: the steered text, and the
# unsteered one written beside it on the worker's side thread.
relaunch --model smollm2 --text "I think dogs are"
sleep 6
nudge 3
click 1220 166 1
click 1213 296 3
click 1138 117 1
sleep 15
xdotool mousemove 1300 800
shot steered-continuation 2

# An encoder–decoder (the tiny random BART test fixture: no real translation model is needed
# offline): a target typed in the Target box, Cross picked: target tokens on the left, source tokens
# on the right; then one target token pinned, its lines and per-head bars over the source.
relaunch --model "$PWD/tests/fixtures/models/tiny-bart" --text "The cat sat on the mat."
sleep 6
nudge 3
click 770 64 1
xdotool key ctrl+a
xdotool type --delay 40 "Le chat est assis sur le tapis."
sleep 1.5
click 1015 123 1
xdotool mousemove 1300 800
shot seq2seq-cross 1
click 405 373
xdotool mousemove 1300 800
shot seq2seq-cross-pinned 1

# A long input (the Zen of Python twelve times, ~2,200 SmolLM2 tokens): past "Record up to" each
# head is computed once as the pass runs and pooled — the model view of the overview (spans of 9
# tokens), then the window (the last 256 tokens at token level, everything before them one span)
# at layer 2 with one of its tokens pinned.
ZEN=$(python3 -c "import this" | tr '\n' ' ')
LONG=$(for _ in $(seq 12); do printf '%s ' "$ZEN"; done)
relaunch --model smollm2 --text "$LONG"
sleep 25
nudge 4
click 403 176
xdotool mousemove 1300 800
shot long-overview 2
click 316 176
click 161 140
click 98 676 1
click 500 560
xdotool mousemove 1300 800
shot long-window 1
# What heads do, on SmolLM2: the logit lens of "The capital of France is", fitted (all 31 streams),
# with block 29 at "is" hovered (" Paris" third there, first at the output); the logit attribution
# of " Paris" (tab bar's second row), fitted, with head 23.4 clicked (what its write promotes); the
# contribution graph of the prediction; the head roles on the probe, coloured by induction.
relaunch --model smollm2 --text "The capital of France is"
sleep 4
nudge 3
click 1087 76 2
nudge 3
xdotool mousemove 553 574
shot lens 1
click 333 99 2
click 433 487 1.5
shot attribution 1
click 460 99 4
nudge 6
xdotool mousemove 1300 800
shot contribution-graph 2
click 675 76 1.5
click 884 177 2
click 608 177 1
xdotool mousemove 560 600
for _ in $(seq 12); do xdotool click 5; sleep 0.1; done
xdotool mousemove 1300 800
shot head-roles 1
# Attention sinks (the tiny gpt-oss fixture): layer 1, head 1 alone (a double click) in the head view,
# its rows going to the sink drawn apart below the keys.
relaunch --model "$PWD/tests/fixtures/models/tiny-gpt-oss" --text "The animal didn't cross the street because it was too tired."
sleep 3
nudge 3
click 60 478
xdotool mousemove 62 576
xdotool click --repeat 2 --delay 80 1
nudge 2
click 316 76 1
xdotool mousemove 1300 800
shot gpt-oss-sink 1
# The experts of a mixture of experts (the tiny random Qwen3-MoE fixture): each token's two experts
# per layer, fitted; token 3's route through the layers.
relaunch --model "$PWD/tests/fixtures/models/tiny-qwen3-moe" --text "The animal didn't cross the street because it was too tired."
sleep 3
nudge 3
click 636 99 1
click 515 183 1
xdotool mousemove 1300 800
shot experts 1

# Activation patching on SmolLM2 (an IOI pair: sentence B swaps the second name): the resid-pre grid
# (layer × position), fitted, then the head grid; each sweep runs in the background (~3 and ~8 s
# under load: PATCH_WAIT).
relaunch --model smollm2 --text "When Mary and John went to the store, John gave a drink to" \
  --text-pair "When Mary and John went to the store, Mary gave a drink to"
sleep 4
nudge 3
click 565 99 "${PATCH_WAIT:-12}"
xdotool mousemove 1300 800
shot patching-resid-pre 1
click 561 183 "${PATCH_WAIT:-12}"
xdotool mousemove 1300 800
shot patching-heads 1

# The training lab: the playground's "Train a transformer…", Train with the default induction
# settings (the PyTorch peer's model); once the loss has dropped (the induction head formed: step
# ~450; the 1,500 steps take ~45 s on a quiet 2-core machine, minutes on a busy one: TRAIN_WAIT,
# 75 s), and the head view shows layer 0's head 1 alone on the repeated probe: every token looks at
# the token after its earlier occurrence. Then the lab's curves scrolled into view, and the course's
# experiment (task: sentiment, three variants) with its table.
relaunch
sleep 4
click 48 117
click 78 539 2
click 1067 498 2
sleep "${TRAIN_WAIT:-75}"
xdotool mousemove 62 604
xdotool click --repeat 2 --delay 80 1
nudge 3
xdotool mousemove 1300 700
shot training-lab 2
xdotool mousemove 1190 600
for _ in $(seq 10); do xdotool click 5; sleep 0.1; done
nudge 3
shot training-curves 1
for _ in $(seq 10); do xdotool click 4; sleep 0.1; done
click 1198 149 1
click 1150 247 1
click 1135 521 1
sleep "${EXPERIMENT_WAIT:-100}"
xdotool mousemove 1190 600
for _ in $(seq 10); do xdotool click 5; sleep 0.1; done
nudge 3
shot training-experiment 1
