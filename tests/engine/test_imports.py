"""The engine stands alone: no module under ``engine/`` imports the adapters or the bindings.

The engine defines what it reads and writes (``engine/contracts.py``); the adapters implement those
contracts and the bindings build queries on top, so both import the engine and never the other
way. Read from the source with ``ast``: imports inside functions and ``TYPE_CHECKING`` blocks
count too, and so do relative imports (``from .. import adapters``).
"""

from __future__ import annotations

import ast
from pathlib import Path

import ctistream.adapters
import ctistream.engine
from ctistream.engine import contracts

import ctistream

ENGINE = Path(ctistream.engine.__file__).parent
FORBIDDEN = ("ctistream.adapters", "ctistream.bindings")


def _forbidden(name: str) -> bool:
    return any(name == f or name.startswith(f + ".") for f in FORBIDDEN)


def _module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(("ctistream", "engine", *parts))


def _imported(tree: ast.Module, module: str, is_package: bool) -> list[tuple[int, str]]:
    """The modules the import statements of ``module`` name, with their lines: for ``from X
    import y``, ``X`` and, when ``X`` is allowed, ``X.y`` (``y`` may be a submodule); relative
    names resolved."""
    package = module if is_package else module.rpartition(".")[0]
    names: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            if _forbidden(base):
                names.append((node.lineno, base))
            else:
                names += [(node.lineno, f"{base}.{alias.name}") for alias in node.names]
    return names


def _violations(root: Path) -> list[str]:
    found = []
    for path in sorted(root.rglob("*.py")):
        module = _module_name(path, root)
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for line, name in _imported(tree, module, path.name == "__init__.py"):
            if _forbidden(name):
                found.append(f"{path.relative_to(root.parent)}:{line} imports {name}")
    return sorted(set(found))


def test_the_rule_reads_every_form_of_import(tmp_path):
    # The checker itself, on a scratch tree laid out like engine/: each form below names an
    # adapter or binding module, so each line is reported; the last import is allowed.
    scratch = tmp_path / "engine"
    (scratch / "operators").mkdir(parents=True)
    (scratch / "__init__.py").write_text("")
    (scratch / "operators" / "__init__.py").write_text("from ... import bindings\n")
    (scratch / "operators" / "x.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from ctistream.adapters.memory import EventScript\n"
        "def f():\n"
        "    import ctistream.bindings.query\n"
        "from ctistream import adapters\n"
        "from ...adapters import kafka\n"
        "from .. import contracts\n"
    )
    assert _violations(scratch) == [
        "engine/operators/__init__.py:1 imports ctistream.bindings",
        "engine/operators/x.py:3 imports ctistream.adapters.memory",
        "engine/operators/x.py:5 imports ctistream.bindings.query",
        "engine/operators/x.py:6 imports ctistream.adapters",
        "engine/operators/x.py:7 imports ctistream.adapters",
    ]


def test_no_engine_module_imports_the_adapters_or_the_bindings():
    found = _violations(ENGINE)
    assert found == [], (
        "the engine must not import the adapters or the bindings (they import the engine); "
        f"found: {'; '.join(found)}. Fix: move what the engine needs into the engine (adapter "
        "contracts live in engine/contracts.py)"
    )


def test_the_contracts_are_the_engines_and_exported_where_users_look_for_them():
    for name in contracts.__all__:
        defined = getattr(contracts, name)
        assert defined.__module__ == "ctistream.engine.contracts"
        assert getattr(ctistream.adapters, name) is defined
        assert getattr(ctistream, name) is defined
        assert name in ctistream.adapters.__all__ and name in ctistream.__all__
