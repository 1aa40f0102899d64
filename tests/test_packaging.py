"""Packaging: desktop entry, AppStream metainfo, icons, PyInstaller spec and the wheel's contents.

The wheel test builds a real wheel (a few seconds); the end-to-end check (fresh venv, installed demo run)
is slow and runs only with SPECSCOPE_WHEEL_CHECK=1.
"""

from __future__ import annotations

import ast
import configparser
import os
import shutil
import struct
import subprocess
import sys
import zipfile
from pathlib import Path
from xml.etree import ElementTree

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parent.parent
PACKAGING = ROOT / "packaging"
ICONS = ROOT / "resources" / "icons"
APP_ID = "io.github.specscope.Specscope"
ICON_SIZES = (16, 32, 48, 64, 128, 256)
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
# Entry points the desktop entry and metainfo may name; must match pyproject's scripts.
SCRIPTS = {"specscope", "specscope-cli", "specscope-gui"}


def desktop_entry() -> configparser.SectionProxy:
    parser = configparser.ConfigParser(interpolation=None, strict=True)
    parser.optionxform = str  # type: ignore[assignment,method-assign]  # keys are case-sensitive
    parser.read(PACKAGING / f"{APP_ID}.desktop", encoding="utf-8")
    return parser["Desktop Entry"]


def metainfo() -> ElementTree.Element:
    return ElementTree.parse(PACKAGING / f"{APP_ID}.metainfo.xml").getroot()


def png_size(path: Path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == PNG_SIGNATURE, f"{path.name} is not a PNG"
    assert head[12:16] == b"IHDR", f"{path.name} has no IHDR chunk first"
    width, height = struct.unpack(">II", head[16:24])
    return width, height


def test_desktop_entry_has_required_keys_and_matches_app_id() -> None:
    entry = desktop_entry()
    for key in ("Type", "Name", "Comment", "Exec", "Icon", "Categories", "Terminal", "StartupWMClass"):
        assert entry.get(key), f"missing {key}"
    assert entry["Type"] == "Application"
    assert entry["Icon"] == APP_ID
    assert entry["Terminal"] == "false"
    exec_program = entry["Exec"].split()[0]
    assert exec_program == "specscope-gui", "the menu entry must start the console-less GUI script"
    assert entry["TryExec"] == exec_program
    # Qt's X11 WM_CLASS is the application name the app sets (app/main.py: setApplicationName).
    assert entry["StartupWMClass"] == "specscope"
    assert entry["Categories"].endswith(";")


def test_metainfo_is_appstream_with_matching_ids() -> None:
    root = metainfo()
    assert root.tag == "component" and root.get("type") == "desktop-application"
    for tag in ("id", "name", "summary", "description", "metadata_license", "project_license",
                "launchable", "provides", "content_rating", "releases", "screenshots"):
        assert root.find(tag) is not None, f"missing <{tag}>"
    assert root.findtext("id") == APP_ID
    launchable = root.find("launchable")
    assert launchable is not None and launchable.get("type") == "desktop-id"
    assert launchable.text == f"{APP_ID}.desktop"
    assert (PACKAGING / launchable.text).is_file()
    binaries = {b.text for b in root.iterfind("provides/binary")}
    assert binaries and binaries <= SCRIPTS
    assert desktop_entry()["Exec"].split()[0] in binaries
    assert root.findtext("name") == desktop_entry()["Name"]
    assert root.find("content_rating").get("type", "").startswith("oars-")  # type: ignore[union-attr]
    release_versions = [r.get("version") for r in root.iterfind("releases/release")]
    assert release_versions and all(r.get("date") for r in root.iterfind("releases/release"))
    images = [i.text or "" for i in root.iterfind("screenshots/screenshot/image")]
    assert images and all(i.endswith("docs/screenshot.png") for i in images)


def test_metainfo_release_matches_package_version() -> None:
    from specscope import __version__

    versions = [r.get("version") for r in metainfo().iterfind("releases/release")]
    assert __version__ in versions, f"add a <release version=\"{__version__}\"> to the metainfo"


def test_icons_exist_at_each_size() -> None:
    svg = ElementTree.parse(ICONS / "specscope.svg").getroot()
    assert svg.tag.endswith("svg") and svg.get("viewBox") == "0 0 256 256"
    for size in ICON_SIZES:
        assert png_size(ICONS / f"specscope-{size}.png") == (size, size)


def test_png_size_rejects_a_non_png(tmp_path: Path) -> None:
    fake = tmp_path / "fake.png"
    fake.write_bytes(b"GIF89a" + bytes(40))
    with pytest.raises(AssertionError, match="not a PNG"):
        png_size(fake)


def test_pyinstaller_spec_parses_and_collects_resources() -> None:
    source = (PACKAGING / "specscope.spec").read_text(encoding="utf-8")
    tree = ast.parse(source, filename="specscope.spec")
    called = {n.func.id for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
    assert {"Analysis", "PYZ", "EXE", "COLLECT"} <= called
    strings = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)}
    assert "launcher.py" in strings
    for resource in ("prompts", "demo_draft", "icons"):
        assert f"specscope/resources/{resource}" in strings, f"{resource} is not collected"
    assert "tests" in strings, "tests must be excluded from the bundle"
    assert {"specscope", "specscope-gui"} <= strings
    # Every path the spec stages from must exist in the checkout.
    for folder in ("specscope_pkg", "core", "app", "resources"):
        assert folder in strings and (ROOT / folder).is_dir()


# ---- the tested versions: packaging/constraints.txt, which ./dev.sh (and so CI) installs from ----
CONSTRAINTS = PACKAGING / "constraints.txt"
NOT_PINNED = {"torch"}  # dev.sh's own pin, only when no torch is importable: a user's CUDA build stays


def _pyproject_requirements() -> list[Requirement]:
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    named = [*project["dependencies"], *(r for extra in project["optional-dependencies"].values() for r in extra)]
    return [Requirement(r) for r in named]


def _pins() -> dict[str, Version]:
    pins: dict[str, Version] = {}
    for line in CONSTRAINTS.read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        requirement = Requirement(line)
        (spec,) = requirement.specifier  # one exact version per line
        assert spec.operator == "==", f"{line!r} is not an exact pin"
        name = canonicalize_name(requirement.name)
        assert name not in pins, f"{name} is pinned twice"
        pins[name] = Version(spec.version)
    return pins


def test_every_dependency_has_a_tested_version_inside_its_range() -> None:
    """A dependency added to pyproject without a pin would again follow its newest release in CI; a pin outside
    pyproject's range would make the set-up fail."""
    pins = _pins()
    for requirement in _pyproject_requirements():
        name = canonicalize_name(requirement.name)
        if name in NOT_PINNED:
            assert name not in pins
            continue
        assert name in pins, f"{name} (pyproject.toml) has no tested version in {CONSTRAINTS.name}"
        assert requirement.specifier.contains(pins[name]), f"{name}=={pins[name]} is outside {requirement}"


def test_the_setup_runs_again_when_a_pin_moves(tmp_path: Path) -> None:
    """dev.sh's stamp: a moved pin must reinstall, as an edited pyproject does."""
    for name in ("dev.sh", "pyproject.toml", "packaging/constraints.txt"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / name, tmp_path / name)
    definitions = [line for line in (ROOT / "dev.sh").read_text(encoding="utf-8").splitlines()
                   if line.startswith(("CONSTRAINTS=", "setup_hash()"))]
    script = "\n".join([*definitions, "setup_hash"])

    def setup_hash() -> str:
        return subprocess.run(["bash", "-c", script], cwd=tmp_path, capture_output=True, text=True,
                              check=True).stdout.strip()

    before = setup_hash()
    with (tmp_path / "packaging/constraints.txt").open("a", encoding="utf-8") as f:
        f.write("transformers==9.9.9\n")
    assert len(before) == 64 and setup_hash() != before


@pytest.fixture(scope="module")
def built_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A wheel built from a copy of the tree, so a shared checkout's build/ directory is never touched."""
    work = tmp_path_factory.mktemp("wheel")
    src = work / "src"
    generated = shutil.ignore_patterns(".venv", ".git", "build", "dist", "*.egg-info", "__pycache__",
                                       ".*_cache", ".typecheck", "bench-out", "tests", "docs")
    shutil.copytree(ROOT, src, ignore=generated, symlinks=True)
    out = work / "dist"
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out), str(src)],
        capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    (wheel,) = out.glob("specscope-*.whl")
    return wheel


def test_wheel_contains_the_package_and_its_resources(built_wheel: Path) -> None:
    names = zipfile.ZipFile(built_wheel).namelist()

    def under(prefix: str, suffix: str = "") -> list[str]:
        return [n for n in names if n.startswith(prefix) and n.endswith(suffix)]

    assert "specscope/launcher.py" in names
    assert "specscope/core/engine/speculative.py" in names and "specscope/core/engine/drafters/base.py" in names
    assert "specscope/app/main.py" in names and under("specscope/app/widgets/", ".py")
    prompts = {Path(n).name for n in under("specscope/resources/prompts/", ".json")}
    assert prompts == {p.name for p in (ROOT / "resources" / "prompts").glob("*.json")}
    demo = {Path(n).name for n in under("specscope/resources/demo_draft/")}
    assert {"config.json", "draft_layers.safetensors.xz"} <= demo
    icons = {Path(n).name for n in under("specscope/resources/icons/")}
    assert {"specscope.svg", *(f"specscope-{s}.png" for s in ICON_SIZES)} <= icons


def test_wheel_installs_nothing_at_the_top_level_but_specscope(built_wheel: Path) -> None:
    names = zipfile.ZipFile(built_wheel).namelist()
    tops = {n.split("/")[0] for n in names}
    assert not tops & {"core", "app", "resources", "tests", "specscope_pkg"}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"specscope"}
    entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    text = zipfile.ZipFile(built_wheel).read(entry_points).decode()
    for script in SCRIPTS:
        assert f"{script} = " in text


@pytest.mark.wheel  # full tier only; ./dev.sh test --all sets SPECSCOPE_WHEEL_CHECK=1
@pytest.mark.skipif(os.environ.get("SPECSCOPE_WHEEL_CHECK") != "1", reason="set SPECSCOPE_WHEEL_CHECK=1")
def test_check_wheel_script_end_to_end() -> None:
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "check_wheel.sh")], capture_output=True, text=True,
                          timeout=1800)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    assert "check_wheel: OK" in proc.stdout
