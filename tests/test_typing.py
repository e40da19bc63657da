"""``mypy --strict examples/`` finds the library's types, as a user who installed the wheel
would: the package ships ``py.typed`` (PEP 561), so its annotations count and its own modules
are not checked."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _installed_layout(into: Path) -> Path:
    """The package tree as the wheel lays it out (pyproject's ``package-dir``: ``engine/`` as
    ``ctistream/engine`` ...), made of links to the repository's files. An editable install
    maps the names with an import hook, which a static checker cannot follow."""
    setup = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    mapped = setup["package-dir"]
    for package in setup["packages"]:
        parent = max((p for p in mapped if package == p or package.startswith(p + ".")), key=len)
        folder = ROOT / mapped[parent] / package.removeprefix(parent).strip(".").replace(".", "/")
        target = into.joinpath(*package.split("."))
        target.mkdir(parents=True)
        for source in folder.iterdir():
            if source.suffix in (".py", ".typed"):
                (target / source.name).symlink_to(source)
    return into


# mypy's cache (.mypy_cache/, ignored by git) keeps what it learnt of pyspark, pandas and the rest:
# about 30 s the first time, a few seconds after.
def test_mypy_strict_on_the_examples_finds_the_librarys_types(tmp_path):
    site = _installed_layout(tmp_path / "site")
    assert (site / "ctistream" / "py.typed").exists()
    env = {**os.environ, "PYTHONPATH": str(site)}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            "examples/",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    n = len(list((ROOT / "examples").glob("*.py")))
    assert done.stdout.strip() == f"Success: no issues found in {n} source files", done.stdout
