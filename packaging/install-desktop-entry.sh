#!/usr/bin/env bash
# Install specscope's desktop entry, AppStream metainfo and icons for the current user, so the app shows
# up in the desktop menu. Exec points at the absolute path of the installed `specscope-gui`, because a
# virtual environment's bin/ is rarely on the desktop session's PATH.
#
#   packaging/install-desktop-entry.sh                       use the specscope-gui found on PATH
#   packaging/install-desktop-entry.sh --exec /path/to/specscope-gui
#   packaging/install-desktop-entry.sh --venv .venv          use .venv/bin/specscope-gui
#   packaging/install-desktop-entry.sh --uninstall
# Installs under ${XDG_DATA_HOME:-~/.local/share} (override with --data-dir DIR).
set -euo pipefail

APP_ID=io.github.specscope.Specscope
HERE=$(cd "$(dirname "$0")" && pwd)
ICONS=$HERE/../resources/icons
SIZES=(16 32 48 64 128 256)
DATA_DIR=${XDG_DATA_HOME:-$HOME/.local/share}
EXEC=""
UNINSTALL=0

die() { echo "install-desktop-entry: $*" >&2; exit 2; }

while [ $# -gt 0 ]; do
    case "$1" in
        --exec) [ $# -ge 2 ] || die "--exec needs a path"; EXEC=$2; shift 2 ;;
        --venv) [ $# -ge 2 ] || die "--venv needs a directory"; EXEC=$2/bin/specscope-gui; shift 2 ;;
        --data-dir) [ $# -ge 2 ] || die "--data-dir needs a directory"; DATA_DIR=$2; shift 2 ;;
        --uninstall) UNINSTALL=1; shift ;;
        -h|--help) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) die "unknown argument: $1 (see --help)" ;;
    esac
done

DESKTOP_DEST=$DATA_DIR/applications/$APP_ID.desktop
METAINFO_DEST=$DATA_DIR/metainfo/$APP_ID.metainfo.xml
SVG_DEST=$DATA_DIR/icons/hicolor/scalable/apps/$APP_ID.svg
png_dest() { echo "$DATA_DIR/icons/hicolor/$1x$1/apps/$APP_ID.png"; }

refresh_caches() {
    if command -v update-desktop-database >/dev/null; then
        update-desktop-database -q "$DATA_DIR/applications" 2>/dev/null || true
    fi
    if command -v gtk-update-icon-cache >/dev/null && [ -f "$DATA_DIR/icons/hicolor/index.theme" ]; then
        gtk-update-icon-cache -q -t "$DATA_DIR/icons/hicolor" 2>/dev/null || true
    fi
}

if [ "$UNINSTALL" = 1 ]; then
    rm -f "$DESKTOP_DEST" "$METAINFO_DEST" "$SVG_DEST"
    for s in "${SIZES[@]}"; do rm -f "$(png_dest "$s")"; done
    refresh_caches
    echo "removed $APP_ID from $DATA_DIR"
    exit 0
fi

if [ -z "$EXEC" ]; then
    EXEC=$(command -v specscope-gui) || die "specscope-gui is not on PATH: install specscope, or pass --exec PATH or --venv DIR"
fi
[ -x "$EXEC" ] || die "not an executable: $EXEC"
EXEC=$(cd "$(dirname "$EXEC")" && pwd)/$(basename "$EXEC")
[ -f "$ICONS/specscope.svg" ] || die "icons not found in $ICONS (run from a specscope source checkout)"

# Desktop Entry spec: a quoted Exec argument escapes \ " ` $ with a backslash.
quoted_exec=$(printf '%s' "$EXEC" | sed 's/[\\"`$]/\\&/g')

mkdir -p "$(dirname "$DESKTOP_DEST")" "$(dirname "$METAINFO_DEST")" "$(dirname "$SVG_DEST")"
sed -e "s|^Exec=.*|Exec=\"$quoted_exec\"|" -e "s|^TryExec=.*|TryExec=$EXEC|" \
    "$HERE/$APP_ID.desktop" > "$DESKTOP_DEST"
install -m 644 "$HERE/$APP_ID.metainfo.xml" "$METAINFO_DEST"
install -m 644 "$ICONS/specscope.svg" "$SVG_DEST"
for s in "${SIZES[@]}"; do
    mkdir -p "$(dirname "$(png_dest "$s")")"
    install -m 644 "$ICONS/specscope-$s.png" "$(png_dest "$s")"
done
refresh_caches
echo "installed $APP_ID into $DATA_DIR (Exec=$EXEC)"
