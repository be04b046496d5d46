"""The built site loads nothing from the network: no external scripts, stylesheets,
images, fonts or frames, and MathJax is served from the site itself.

Plain hyperlinks (<a href="https://...">) to other sites are fine.
Runs after `make book` (which `make test` does first); skips if _build/html is missing, fails then in CI.
"""

from __future__ import annotations

import json
import os
import re
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

SITE = Path(os.environ.get("COURSE_SITE_DIR", Path(__file__).resolve().parents[1] / "_build" / "html"))
# book/_templates/layout.html loads MathJax's loader, which loads the components named in the page's
# `window.MathJax = {"loader": {"load": [...]}}` (mathjax3_config in _config.yml) from the same folder.
MATHJAX_ENTRY = SITE / "_static" / "mathjax" / "startup.js"
MATHJAX_CONFIG = re.compile(r"<script>window\.MathJax = (\{.*?\})</script>")

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


def test_mathjax_is_served_from_the_site():
    pages = _html_pages()
    assert MATHJAX_ENTRY.is_file(), f"{MATHJAX_ENTRY} missing: is sphinx-mathjax-offline enabled?"
    fonts = SITE / "_static" / "mathjax" / "output" / "chtml" / "fonts" / "woff-v2"
    assert any(fonts.glob("*.woff")), f"MathJax fonts missing under {fonts}"
    problems = []
    for page in pages:
        for src in _scan(page).scripts:
            if "mathjax" not in src.lower():
                continue
            if EXTERNAL.match(src):
                problems.append(f"{page.relative_to(SITE)}: MathJax from {src}")
            elif not _resolve_local(page, src).is_file():
                problems.append(f"{page.relative_to(SITE)}: MathJax script {src} not in the site")
    assert not problems, "\n".join(problems)


def test_mathjax_components_are_in_the_site():
    """Every component the MathJax loader is told to load is a file of the site (a missing one would leave the
    math as raw TeX), and at least one page has math, so this checks something."""
    problems, configured = [], 0
    for page in _html_pages():
        for config in MATHJAX_CONFIG.findall(page.read_text(encoding="utf-8", errors="replace")):
            configured += 1
            for name in json.loads(config).get("loader", {}).get("load", []):
                path = MATHJAX_ENTRY.parent / (name if name.endswith(".js") else f"{name}.js")
                if not path.is_file():
                    problems.append(f"{page.relative_to(SITE)}: MathJax component {name} ({path}) missing")
    assert configured, "no page configures MathJax"
    assert not problems, "\n".join(problems)
