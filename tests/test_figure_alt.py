"""Every figure in the book has a text alternative that says what it draws (issue 28): the notebooks' setup cells
call ``plotting.describe_figures()``, so each figure's text/plain is ``plotting.describe(fig)`` (its title, panels,
axes and legend), and ``scripts/figure_alt.py`` (run by ``scripts/save_notebooks.sh``) puts it in the cell's
``mystnb.image.alt``, which myst-nb writes into the page's ``<img alt>``; without it the alt is the file's hash."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
sys.path.insert(0, str(ROOT / "scripts"))
from figure_alt import alt_texts  # noqa: E402


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_each_figure_carries_its_description_as_alt(path):
    nb = json.loads(path.read_text(encoding="utf-8"))
    for cell in nb["cells"]:
        images = [o for o in cell.get("outputs", []) if "image/png" in o.get("data", {})]
        if not images:
            continue
        texts = alt_texts(cell)
        assert len(texts) == len(images), "a figure without describe(fig) as its text/plain"
        assert all(t.startswith("Figure: ") and len(t) > 20 for t in texts)
        assert cell["metadata"]["mystnb"]["image"]["alt"] == " ".join(texts)


def test_describe_reads_the_figure_s_own_texts():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from meshplan.course.plotting import describe

    fig, (a, b) = plt.subplots(1, 2)
    fig.suptitle("Bytes per step")
    a.set_title("TP")
    a.set_xlabel("GPUs")
    a.plot([1, 2], label="ring")
    a.legend()
    b.set_ylabel("GB")
    b.plot([1, 2])
    text = describe(fig)
    plt.close(fig)
    assert text == "Figure: Bytes per step. Panel 1: “TP”; x axis GPUs; legend: ring. Panel 2: y axis GB."


def test_the_built_pages_have_no_file_name_for_an_alt():
    site = ROOT / "_build" / "html"
    if not (site / "notebooks").is_dir():
        pytest.skip("site not built")
    bad = []
    for page in sorted((site / "notebooks").glob("*.html")):
        for alt in re.findall(r'<img [^>]*alt="([^"]*)"', page.read_text(encoding="utf-8")):
            if alt.startswith(("../_images/", "_images/")) or not alt.strip():
                bad.append(f"{page.name}: {alt[:60]}")
    assert bad == []
