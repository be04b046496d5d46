"""Copy each figure's description into its cell's ``mystnb.image.alt`` (run by ``scripts/save_notebooks.sh``).

The notebooks' setup cells call ``meshplan.course.plotting.describe_figures()``, so a figure's text/plain output is
``describe(fig)``: "Figure: <title>. <panels, axes, legend>." myst-nb takes an image's alt text only from the cell's
metadata (``render_image_options``, read from ``mystnb.image``), so this copies it there; a cell whose image has no
such description keeps no alt and ``tests/test_figure_alt.py`` fails on it.

    .venv/bin/python scripts/figure_alt.py notebooks/01_one_gpu.ipynb ...
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def alt_texts(cell: dict) -> list[str]:
    """The descriptions of the figures a code cell displayed (their text/plain beside an image/png)."""
    out = []
    for o in cell.get("outputs", []):
        data = o.get("data", {})
        if "image/png" in data:
            text = "".join(data.get("text/plain", ""))
            if text.startswith("Figure: "):
                out.append(text)
    return out


def apply(path: Path) -> int:
    """Set (or drop) every figure cell's alt; the number of cells changed. The file is rewritten only if one did."""
    raw = path.read_text(encoding="utf-8")
    nb = json.loads(raw)
    changed = 0
    for cell in nb["cells"]:
        if cell["cell_type"] != "code":
            continue
        texts = alt_texts(cell)
        meta = cell.setdefault("metadata", {})
        mystnb = meta.get("mystnb", {})
        image = dict(mystnb.get("image", {}))
        want = " ".join(texts) if texts else None
        if image.get("alt") == want or (want is None and "alt" not in image):
            continue
        if want is None:
            image.pop("alt", None)
        else:
            image["alt"] = want
        if image:
            mystnb["image"] = image
        else:
            mystnb.pop("image", None)
        if mystnb:
            meta["mystnb"] = mystnb
        else:
            meta.pop("mystnb", None)
        changed += 1
    if changed:
        path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return changed


if __name__ == "__main__":
    n = sum(apply(Path(p)) for p in sys.argv[1:])
    print(f"figure_alt: {n} figure cell(s) given their alt text")
