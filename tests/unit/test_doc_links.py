"""Every relative link in README.md and in docs/**/*.md points at a file or folder that exists: a page
moved or renamed must take its links along. Web links (http, https, mailto) and in-page anchors are not
checked; a link's own anchor (`page.md#section`) is dropped before the file is looked up. Links inside
code (fenced blocks, `inline code`) are text, not links."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote

import pytest

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
# [text](target) and ![alt](target), with an optional "title"; the target may be wrapped in <...>
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*(?:<([^>]+)>|([^)\s]+))(?:\s+\"[^\"]*\")?\s*\)")
FENCE = re.compile(r"^\s*(```|~~~)")
INLINE_CODE = re.compile(r"(`+)(?:(?!\1).)+?\1")
WEB = ("http://", "https://", "mailto:", "ftp://")


def relative_links(text: str) -> list[tuple[int, str]]:
    """(line number, target) of each relative link outside code."""
    links, in_fence = [], False
    for number, line in enumerate(text.splitlines(), start=1):
        if FENCE.match(line):
            in_fence = not in_fence
            continue
        if in_fence:
            continue
        for match in LINK.finditer(INLINE_CODE.sub("", line)):
            target = match.group(1) or match.group(2)
            if not target.startswith(WEB) and not target.startswith("#"):
                links.append((number, target))
    return links


def test_the_link_finder_reads_markdown_as_a_renderer_does():
    text = "\n".join(
        [
            'See [the guide](docs/user-guide.md#own-task) and ![plot](a/b.png "title").',
            "Not links: `[x](nowhere.md)`, [web](https://example.com), [top](#top).",
            "```",
            "[in a fence](gone.md)",
            "```",
            "[a [nested] label](<with space.md>)",
        ]
    )
    assert relative_links(text) == [(1, "docs/user-guide.md#own-task"), (1, "a/b.png"), (6, "with space.md")]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_resolves(page):
    broken = []
    for number, target in relative_links(page.read_text(encoding="utf-8")):
        path = unquote(target.split("#", 1)[0].split("?", 1)[0])
        resolved = (REPO / path.lstrip("/")) if path.startswith("/") else (page.parent / path)
        if not resolved.exists():
            broken.append(f"{page.relative_to(REPO)}:{number}: {target}")
    assert not broken, "links to files that do not exist (fix the link or the page):\n" + "\n".join(broken)
