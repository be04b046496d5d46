"""The built site loads nothing from the network: no external scripts, stylesheets,
images, fonts or frames; its math is typeset when the site is built, with fonts from the site itself.

Plain hyperlinks (<a href="https://...">) to other sites are fine.
Runs after `make book` (which `make test` does first); skips if _build/html is missing, fails then in CI.
"""

from __future__ import annotations

import os
import re
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

SITE = Path(os.environ.get("COURSE_SITE_DIR", Path(__file__).resolve().parents[1] / "_build" / "html"))
# The build typesets the math (scripts/typeset_math.js): a page keeps no MathJax script or configuration, each
# Sphinx math element holds an <mjx-container>, and MathJax's stylesheet names its fonts under _static/mathjax/.
MATHJAX_CONFIG = re.compile(r"<script>window\.MathJax = (\{.*?\})</script>")
MATH_ELEMENT = re.compile(r'<(?:span|div) class="math notranslate nohighlight">(.*?)</(?:span|div)>', re.DOTALL)
FONT_URL = re.compile(r'src: url\("([^"]+\.woff)"\)')

# <link rel=...> values that do not make the browser fetch anything.
NON_LOADING_RELS = {
    "canonical",
    "alternate",
    "author",
    "license",
    "help",
    "next",
    "prev",
    "search",
    "index",
    "bookmark",
    "external",
    "nofollow",
    "noopener",
    "noreferrer",
}
# (tag, attribute) pairs whose URL the browser loads.
LOADING_ATTRS = {
    ("script", "src"),
    ("img", "src"),
    ("img", "srcset"),
    ("source", "src"),
    ("source", "srcset"),
    ("video", "src"),
    ("video", "poster"),
    ("audio", "src"),
    ("track", "src"),
    ("iframe", "src"),
    ("frame", "src"),
    ("embed", "src"),
    ("object", "data"),
    ("input", "src"),
    ("image", "href"),
    ("image", "xlink:href"),
    ("use", "href"),
    ("use", "xlink:href"),
    ("feimage", "href"),
    ("feimage", "xlink:href"),
}
EXTERNAL = re.compile(r"^\s*(?:https?:)?//", re.IGNORECASE)
CSS_EXTERNAL = re.compile(r"""(?:url\(\s*['"]?|@import\s+['"])\s*((?:https?:)?//[^'")\s]+)""", re.IGNORECASE)


def _urls(tag: str, attr: str, value: str) -> list[str]:
    if attr.endswith("srcset"):
        return [part.strip().split()[0] for part in value.split(",") if part.strip()]
    return [value]


class _Scanner(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.external: list[str] = []  # "<tag attr=url>" loaded from outside
        self.scripts: list[str] = []  # every <script src>
        self._in_style = False

    def handle_starttag(self, tag, attrs):
        attrs = {k.lower(): (v or "") for k, v in attrs}
        for attr, value in attrs.items():
            if (tag, attr) in LOADING_ATTRS:
                for url in _urls(tag, attr, value):
                    if EXTERNAL.match(url):
                        self.external.append(f"<{tag} {attr}={url}>")
            if attr == "style":
                for url in CSS_EXTERNAL.findall(value):
                    self.external.append(f"<{tag} style=url({url})>")
        if tag == "link" and attrs.get("href"):
            rels = set(attrs.get("rel", "").lower().split())
            if not rels <= NON_LOADING_RELS and EXTERNAL.match(attrs["href"]):
                self.external.append(f"<link rel={attrs.get('rel')} href={attrs['href']}>")
        if tag == "script" and attrs.get("src"):
            self.scripts.append(attrs["src"])
        self._in_style = tag == "style"

    handle_startendtag = handle_starttag

    def handle_endtag(self, tag):
        if tag == "style":
            self._in_style = False

    def handle_data(self, data):
        if self._in_style:
            for url in CSS_EXTERNAL.findall(data):
                self.external.append(f"<style> url({url})")


def _html_pages() -> list[Path]:
    if not SITE.is_dir():
        if os.environ.get("CI"):
            pytest.fail(f"{SITE} was not built")
        pytest.skip(f"{SITE} does not exist: build the site first (`make book`)")
    pages = sorted(SITE.rglob("*.html"))
    assert pages, f"no HTML pages under {SITE}"
    return pages


def _scan(page: Path) -> _Scanner:
    scanner = _Scanner()
    scanner.feed(page.read_text(encoding="utf-8", errors="replace"))
    scanner.close()
    return scanner


def _resolve_local(page: Path, url: str) -> Path:
    path = unquote(urlsplit(url).path)
    return (page.parent / path).resolve()


def test_pages_load_nothing_from_the_network():
    problems = []
    for page in _html_pages():
        for ref in _scan(page).external:
            problems.append(f"{page.relative_to(SITE)}: {ref}")
    assert not problems, "external resources in the built site:\n" + "\n".join(problems)


def test_stylesheets_load_nothing_from_the_network():
    _html_pages()  # skip if not built
    problems = []
    for css in sorted(SITE.rglob("*.css")):
        for url in CSS_EXTERNAL.findall(css.read_text(encoding="utf-8", errors="replace")):
            problems.append(f"{css.relative_to(SITE)}: {url}")
    assert not problems, "stylesheets referencing external URLs:\n" + "\n".join(problems)


def test_math_is_typeset_at_build_time_with_fonts_from_the_site():
    """No page runs MathJax (scripts/typeset_math.js typeset every formula when the site was built, and took the
    MathJax scripts out); every math element of every page holds its typeset formula, and every font its styles
    name is a file of the site. At least one page has math, so this checks something."""
    pages = _html_pages()
    fonts = SITE / "_static" / "mathjax" / "output" / "chtml" / "fonts" / "woff-v2"
    assert any(fonts.glob("*.woff")), f"MathJax fonts missing under {fonts}"
    problems, typeset = [], 0
    for page in pages:
        text = page.read_text(encoding="utf-8", errors="replace")
        name = page.relative_to(SITE)
        problems += [f"{name}: loads {src}" for src in _scan(page).scripts if "mathjax" in src.lower()]
        if MATHJAX_CONFIG.search(text):
            problems.append(f"{name}: still configures MathJax")
        spans = MATH_ELEMENT.findall(text)
        untypeset = [body[:60] for body in spans if "<mjx-container" not in body]
        problems += [f"{name}: math left as TeX: {body!r}" for body in untypeset]
        if spans or "<mjx-container" in text:
            typeset += 1
            if 'id="MJX-CHTML-styles"' not in text:
                problems.append(f"{name}: typeset math without MathJax's stylesheet")
            for url in FONT_URL.findall(text):
                if not _resolve_local(page, url).is_file():
                    problems.append(f"{name}: font {url} is not in the site")
    assert typeset, "no page has math: the checks went untested"
    assert not problems, "\n".join(problems)
