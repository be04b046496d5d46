"""scripts/typeset_math.js, the build step that typesets the book's math with the site's own MathJax under Node.

On a scratch site (MathJax 3.2.2 as sphinx-mathjax-offline ships it, linked in as _static/mathjax): a page with
inline and display math comes out typeset (CommonHTML with the hidden MathML that screen readers read), without the
MathJax scripts, with font URLs relative to the page; a second run changes nothing; a TeX error, or a page that loads
MathJax with no configuration, fails the run and names the page and the TeX. The built site itself is checked by
tests/test_site_offline.py and, in Chromium, tests/test_site_layout.py.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from importlib.metadata import distribution
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
SCRIPT = REPO_ROOT / "scripts" / "typeset_math.js"
MATHJAX = Path(str(distribution("sphinx-mathjax-offline").locate_file("sphinx-mathjax-offline/static/mathjax")))
# What book/_templates/layout.html puts in a page with math (the configuration comes from _config.yml).
HEAD = (
    '<script>window.MathJax = {"loader": {"load": ["core", "input/tex", "output/chtml"]}, '
    '"options": {"processHtmlClass": "tex2jax_process|mathjax_process|math|output_area"}}</script>\n'
    '<script defer="defer" src="../_static/mathjax/startup.js"></script>'
)


def _page(body: str, head: str = HEAD) -> str:
    return (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">\n{head}\n</head>\n'
        f'<body><article class="tex2jax_ignore mathjax_ignore">{body}</article></body></html>\n'
    )


GOOD = _page(
    '<p>Model states take <span class="math notranslate nohighlight">\\(16\\Psi\\)</span> bytes.</p>\n'
    '<div class="math notranslate nohighlight">\n'
    "\\[\\underbrace{2\\Psi}_{\\text{weights}} + 14\\Psi = 16\\Psi\\]</div>\n"
    "<pre>\\(not math: the cell is ignored\\)</pre>"
)


@pytest.fixture
def site(tmp_path):
    node = shutil.which("node")
    if node is None:
        if os.environ.get("CI"):
            pytest.fail("node not found: `make node` installs it (the book build needs it)")
        pytest.skip("node not found: run `make node`")
    assert (MATHJAX / "startup.js").is_file(), f"MathJax missing under {MATHJAX}"
    (tmp_path / "_static").mkdir()
    (tmp_path / "_static" / "mathjax").symlink_to(MATHJAX)
    (tmp_path / "notebooks").mkdir()
    return tmp_path


def _run(site: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["node", str(SCRIPT), str(site)], capture_output=True, text=True, timeout=120)


def test_a_page_comes_out_typeset_without_mathjax_and_a_second_run_changes_nothing(site):
    page = site / "notebooks" / "chapter.html"
    page.write_text(GOOD, encoding="utf-8")
    (site / "plain.html").write_text(_page("<p>No math here.</p>", head=""), encoding="utf-8")
    run = _run(site)
    assert run.returncode == 0, run.stderr
    assert "notebooks/chapter.html: 2 formulas" in run.stdout and "1 pages typeset" in run.stdout
    out = page.read_text(encoding="utf-8")
    assert "startup.js" not in out and "window.MathJax" not in out
    assert out.count("<mjx-container") == 2 and len(re.findall(r'<mjx-container[^>]*display="true"', out)) == 1
    assert out.count("<mjx-assistive-mml") == 2 and 'id="MJX-CHTML-styles"' in out
    assert "\\(not math: the cell is ignored\\)" in out  # outside the classes MathJax processes
    assert "font-size: 127.3%" in out  # the scale the browser-side MathJax set beside the book's font
    fonts = re.findall(r'src: url\("([^"]+)"\)', out)
    assert fonts and all(f.startswith("../_static/mathjax/output/chtml/fonts/woff-v2/") for f in fonts), fonts
    assert all((page.parent / f).resolve().is_file() for f in fonts)
    again = _run(site)
    assert again.returncode == 0 and "0 pages typeset" in again.stdout
    assert page.read_text(encoding="utf-8") == out


def test_the_same_page_always_gives_the_same_bytes(site):
    for name in ("a.html", "b.html"):
        (site / "notebooks" / name).write_text(GOOD, encoding="utf-8")
    assert _run(site).returncode == 0
    assert (site / "notebooks" / "a.html").read_bytes() == (site / "notebooks" / "b.html").read_bytes()


@pytest.mark.parametrize(
    "body, words",
    [
        ('<p><span class="math notranslate nohighlight">\\(\\frac{1}\\)</span></p>', ["1 TeX error", "\\frac{1}"]),
        ('<p><span class="math notranslate nohighlight">\\(\\undefinedmacro x\\)</span></p>', ["\\undefinedmacro"]),
    ],
)
def test_a_tex_error_fails_the_run_and_names_the_page_and_the_tex(site, body, words):
    (site / "notebooks" / "bad.html").write_text(_page(body), encoding="utf-8")
    run = _run(site)
    assert run.returncode == 1
    assert "notebooks/bad.html" in run.stderr and all(w in run.stderr for w in words), run.stderr
    assert "Traceback" not in run.stderr and "    at " not in run.stderr


def test_a_page_loading_mathjax_without_its_configuration_fails(site):
    head = '<script defer="defer" src="../_static/mathjax/startup.js"></script>'
    (site / "notebooks" / "bare.html").write_text(_page("<p>\\(x\\)</p>", head=head), encoding="utf-8")
    run = _run(site)
    assert run.returncode == 1 and "carries no window.MathJax configuration" in run.stderr, run.stderr
