"""Architecture boundaries: the engine knows nothing of Qt, and installs under one import name."""

from __future__ import annotations

import ast
import pkgutil
import subprocess
import sys
from pathlib import Path

import specscope.core

ROOT = Path(__file__).resolve().parents[1]
QT_MODULES = ("PySide6", "PyQt5", "PyQt6", "PySide2", "pyqtgraph", "qtpy")


def _imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def test_core_sources_import_no_qt() -> None:
    offenders = {str(p.relative_to(ROOT)): sorted(_imported_modules(p) & set(QT_MODULES))
                 for p in (ROOT / "core").rglob("*.py")}
    assert {p: m for p, m in offenders.items() if m} == {}


def test_importing_every_core_module_loads_no_qt(warm_python) -> None:
    """Also catches Qt pulled in indirectly, through a dependency. The session's warm interpreter
    (tests/warm_python.py) is a fresh one that imports every core module and nothing else first; it reports the
    Qt modules that loaded (it looks for the same names), and the subprocess CLI tests reuse its imports."""
    modules = [m.name for m in pkgutil.walk_packages(specscope.core.__path__, "specscope.core.")]
    assert sorted(warm_python.started["core_modules"]) == sorted(modules)
    assert warm_python.qt_modules == []


def test_one_import_name_no_bare_core_or_app() -> None:
    code = (
        "import importlib.util as u\n"
        "print(u.find_spec('specscope.core') is not None, u.find_spec('specscope.app') is not None,"
        " u.find_spec('core') is None, u.find_spec('app') is None)\n"
    )
    # run outside the source tree so the repository root is not on sys.path
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True,
                         cwd="/")
    assert out.stdout.split() == ["True", "True", "True", "True"]
