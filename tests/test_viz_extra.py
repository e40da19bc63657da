"""Pictures of time live apart from the temporal core, behind the ``viz`` extra: the engine
imports nothing of ``ctistream.viz``, ``import ctistream`` imports no matplotlib, only the
``viz`` extra installs it (the ``test`` extra includes it), and without it a query runs, traces
and writes its HTML timeline, while the PNG, and the ``ctistream`` command that writes one, fail
at the call saying what is missing and the fix.

matplotlib is made missing the way an environment without the extra has it: the import system
refuses it (a finder on ``sys.meta_path`` that raises ``ModuleNotFoundError`` for it, as when
no finder finds it), and the modules already imported are taken out of ``sys.modules``.
"""

from __future__ import annotations

import ast
import inspect
import subprocess
import sys
import tomllib
from importlib.abc import MetaPathFinder
from pathlib import Path

import pytest
from ctistream.adapters.memory import MemoryOutputFactory
from ctistream.bindings.cli import main

from tests.test_timeline import S, build, t0

ROOT = Path(__file__).resolve().parent.parent
FIX = 'Fix: pip install "ctistream[viz]"'


class _Missing(MetaPathFinder):
    """Finds no ``matplotlib``: importing it or a submodule fails as when it is not installed."""

    def find_spec(self, name, path=None, target=None):
        if name == "matplotlib" or name.startswith("matplotlib."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


@pytest.fixture
def no_matplotlib(monkeypatch):
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setattr(sys, "meta_path", [_Missing(), *sys.meta_path])


def test_the_engine_imports_nothing_of_the_visualisation_package():
    importers = []
    for path in sorted((ROOT / "engine").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            else:
                continue
            if any(n.split(".")[:2] == ["ctistream", "viz"] or n == "matplotlib" for n in names):
                importers.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert importers == []


def test_importing_ctistream_and_its_visualisation_package_imports_no_matplotlib():
    # A fresh interpreter where matplotlib cannot be imported: every import below succeeds, and
    # none of them even tried (the finder would have raised).
    code = "\n".join(
        [
            "import sys",
            "from importlib.abc import MetaPathFinder",
            inspect.getsource(_Missing),
            "sys.meta_path.insert(0, _Missing())",
            "import ctistream, ctistream.viz, ctistream.bindings.cli",
            "from ctistream.viz import Timeline, Trace",
            "assert not [m for m in sys.modules if m.startswith('matplotlib')], 'imported'",
        ]
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]


def test_matplotlib_comes_only_with_the_viz_extra_which_the_test_extra_includes():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    assert [d for d in project["dependencies"] if d.startswith("matplotlib")] == []
    assert [d for d in extras["viz"] if d.startswith("matplotlib")] == ["matplotlib>=3.8"]
    assert "ctistream[viz]" in extras["test"]  # CI installs ".[test]"


def test_without_matplotlib_a_query_traces_and_draws_html_and_the_png_says_the_fix(
    app, no_matplotlib, tmp_path
):
    query = build(app)
    try:
        query.run(epochs=1, trace=True)
        # the same results as tests/test_timeline.py's traced run: two windows of 3
        out = MemoryOutputFactory.collected(query.name)
        assert [(e.start, e.payload["n"]) for e in out if not e.is_cti] == [
            (t0, 3),
            (t0 + 10 * S, 3),
        ]
        html = tmp_path / "t.html"
        page = query.timeline(html=html).html()
        # data's points at 2 s and 9 s and ref's [4, 6) were dropped
        assert html.read_text() == page and page.count('<g class="event dropped"') == 3
        png = tmp_path / "t.png"
        with pytest.raises(ImportError) as missing:
            query.timeline(png=png)
        assert str(missing.value) == (
            "drawing the timeline as PNG needs matplotlib, which ctistream installs only with "
            "its \"viz\" extra; got: No module named 'matplotlib'. " + FIX
        )
        assert missing.value.name == "matplotlib" and not png.exists()
    finally:
        app.queries.pop(query.name, None)


def test_without_matplotlib_the_command_refuses_before_running_the_query(
    no_matplotlib, capsys, tmp_path
):
    argv = ["examples/lookup_join.py:query", "--timeline-png", str(tmp_path / "t.png")]
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""  # no query ran: no metrics
    assert captured.err.startswith("ctistream: drawing the timeline as PNG needs matplotlib")
    assert captured.err.rstrip().endswith(f"{FIX}, or run with --no-timeline")
    assert list(tmp_path.iterdir()) == []
