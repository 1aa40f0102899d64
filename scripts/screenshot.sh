#!/usr/bin/env bash
# Screenshot of the real window under Xvfb for the README: docs/screenshot.png (the Qt grab) and
# docs/screenshot-x11.png (what X11 shows, window manager-less). Usage: scripts/screenshot.sh [ITERATIONS]
set -euo pipefail
cd "$(dirname "$0")/.."
ITERATIONS=${1:-70}
PY=${PYTHON:-.venv/bin/python}
PACKAGES=(xvfb libxcb-icccm4 libxcb-keysyms1 imagemagick x11-utils)
missing=()
for p in "${PACKAGES[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
    if [ "$(id -u)" = 0 ]; then
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
    else
        echo "screenshot.sh: please install: ${missing[*]}" >&2; exit 1
    fi
fi

DISPLAY_NUM=${DISPLAY_NUM:-97}
Xvfb ":$DISPLAY_NUM" -screen 0 1600x1000x24 -nolisten tcp >/dev/null 2>&1 &
XVFB_PID=$!
trap 'kill "$XVFB_PID" 2>/dev/null || true' EXIT
export DISPLAY=":$DISPLAY_NUM"
for _ in $(seq 50); do xdpyinfo >/dev/null 2>&1 && break; sleep 0.1; done

mkdir -p docs
OUT=docs/screenshot.png
rm -f "$OUT" "$OUT.done"
unset QT_QPA_PLATFORM
"$PY" scripts/screenshot_app.py "$OUT" --iterations "$ITERATIONS" "${@:2}" &
APP_PID=$!
# Wait for the app to save its grab, then capture the whole X screen while it lingers.
while kill -0 "$APP_PID" 2>/dev/null && [ ! -f "$OUT.done" ]; do sleep 0.5; done
if [ -f "$OUT.done" ]; then
    sleep 0.5
    import -window root docs/screenshot-x11.png
    rm -f "$OUT.done"
fi
wait "$APP_PID"
ls -l docs/screenshot*.png
