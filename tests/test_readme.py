"""The README runs as written: its Python blocks, in order, in one fresh namespace (as one
script), and each prints what the ``text`` block after it shows.

The only setup is what a test cannot avoid: the suite's SparkSession is active, so the README's
own ``Application(...)`` takes it (as it takes any active session), and the files the README
writes (a timeline, a checkpoint) go to a temporary directory."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"
_FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", re.S | re.M)


def readme_blocks(text: str) -> list[tuple[str, str | None]]:
    """Each Python block with the ``text`` block that follows it before the next Python block
    (what it prints), or None when the README shows no output for it."""
    blocks: list[tuple[str, str | None]] = []
    for fence in _FENCE.finditer(text):
        kind, body = fence.group(1), fence.group(2)
        if kind == "python":
            blocks.append((body, None))
        elif kind == "text" and blocks and blocks[-1][1] is None:
            blocks[-1] = (blocks[-1][0], body)
    return blocks


def test_the_readme_blocks_are_found_with_their_output():
    blocks = readme_blocks(README.read_text())
    # the tour, the window, the diagnostics, the binder, the timeline, the continuous run,
    # the cluster
    assert len(blocks) == 7
    expected = [True, True, True, True, False, True, False]
    assert [shown is not None for _, shown in blocks] == expected


def test_every_python_block_of_the_readme_runs_and_prints_what_it_shows(
    spark, tmp_path, monkeypatch, capsys
):
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {"__name__": "__main__"}
    for number, (code, shown) in enumerate(readme_blocks(README.read_text()), start=1):
        exec(compile(code, f"README.md, Python block {number}", "exec"), namespace)
        printed = capsys.readouterr().out
        if shown is None:
            continue
        if shown.startswith("...\n"):  # the README shows the end of what it prints
            assert printed.endswith(shown.removeprefix("...\n")), (number, printed)
        else:
            assert printed == shown, (number, printed)
    # what the README writes lands where it runs, Spark's state snapshots included
    assert any((tmp_path / "checkpoints" / "sensors" / "state").iterdir())
    assert not (README.parent / "checkpoints").exists()
    assert (tmp_path / "timeline.png").stat().st_size > 0
    assert (tmp_path / "timeline.html").read_text().startswith("<!DOCTYPE html>")


def test_the_project_documents_point_only_inside_the_repository():
    root = README.parent
    documents = [README, *sorted(root.glob("docs/*.md")), *sorted(root.glob("benchmarks/*.md"))]
    assert root / "docs" / "semantics.md" in documents
    for document in documents:
        text = document.read_text()
        assert "../shared" not in text and "shared/spec" not in text, document
        for target in re.findall(r"\]\(([^)#\s]+)", text):  # Markdown links
            if "://" in target:
                continue
            path = (document.parent / target).resolve()
            assert path.is_relative_to(root) and path.exists(), (document, target)
    assert "](docs/semantics.md)" in README.read_text()
