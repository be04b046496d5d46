"""What a saved notebook shows a reader, read from its stored outputs (no kernel): its cells, its glued values,
and the text above and below a cell, for tests that an exercise does not print its answer before the reader
predicts it."""

from __future__ import annotations

import json
import re
from pathlib import Path

GLUE_MIME = "application/papermill.record/text/plain"


def cells(notebook: Path) -> list[dict]:
    return json.loads(notebook.read_text(encoding="utf-8"))["cells"]


def glued(nb_cells: list[dict]) -> dict[str, str]:
    """Glue name -> the text ``{glue:text}`` puts on the page."""
    values = {}
    for c in nb_cells:
        for o in c.get("outputs", []):
            record = o.get("data", {}).get(GLUE_MIME)
            if record is not None:
                values[o["metadata"]["scrapbook"]["name"]] = "".join(record).strip("'\"")
    return values


def page_text_around(notebook: Path, marker: str) -> tuple[str, str]:
    """(what the page shows above the first cell containing ``marker``, what it shows below): markdown with the
    glued values filled in, and the text of displayed outputs (HTML, else markdown, else plain text; glue records
    are not displayed)."""
    nb_cells = cells(notebook)
    values = glued(nb_cells)
    index = next(i for i, c in enumerate(nb_cells) if marker in "".join(c["source"]))

    def shown(c: dict) -> str:
        if c["cell_type"] == "markdown":
            return re.sub(r"\{glue:text\}`([^`:]+)[^`]*`", lambda m: values[m.group(1)], "".join(c["source"]))
        texts = []
        for o in c.get("outputs", []):
            data = o.get("data", {})
            if GLUE_MIME in data:
                continue
            for mime in ("text/html", "text/markdown", "text/plain"):
                if mime in data:
                    texts.append("".join(data[mime]))
                    break
        return "\n".join(texts)

    return "\n".join(shown(c) for c in nb_cells[:index]), "\n".join(shown(c) for c in nb_cells[index + 1 :])


def printed(number: str, text: str) -> bool:
    """``number`` appears in ``text`` as a whole number (not inside a longer one)."""
    return re.search(rf"(?<![\d.,]){re.escape(number)}(?![\d])", text) is not None
