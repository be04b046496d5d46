"""Put the live planner's assets into a built site (issue 27): the library as a wheel, and Pyodide from npm.

    .venv/bin/python scripts/build_planner_assets.py _build/html

* ``_static/planner/meshplan-<version>-py3-none-any.whl``: ``pip wheel --no-deps`` of ``lib/`` (pure Python; the page
  unpacks it into Pyodide's site-packages, so the planner runs exactly this commit's library), and
  ``_static/planner/manifest.json`` naming it, with its size.
* ``_static/pyodide/``: the runtime files of the npm package ``pyodide`` (the version ``package.json`` pins, installed
  by ``npm ci`` into ``node_modules/``): the loader, the WebAssembly, its JavaScript glue, the standard library and
  the lock file. Nothing else of Pyodide's is needed: planning imports no compiled package
  (``tests/test_planner_pure.py``), so no package is ever fetched.

Run by ``make book`` and ``make book-stored`` after Jupyter Book has built the HTML. Exits 1 with one line when
Pyodide is not installed (``make node_modules``).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PYODIDE = ROOT / "node_modules" / "pyodide"
RUNTIME = ("pyodide.mjs", "pyodide.asm.mjs", "pyodide.asm.wasm", "python_stdlib.zip", "pyodide-lock.json")


def build(site: Path) -> dict:
    """Write the assets under ``site/_static`` and return the manifest."""
    static = site / "_static"
    if not static.is_dir():
        raise SystemExit(f"build_planner_assets: {static} is not a built site's _static folder (run the book first)")
    missing = [f for f in RUNTIME if not (PYODIDE / f).is_file()]
    if missing:
        raise SystemExit(
            f"build_planner_assets: Pyodide is not installed ({', '.join(missing)}): run make node_modules"
        )
    out = static / "planner"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "wheel",
                "--no-deps",
                "--no-build-isolation",
                "-q",
                str(ROOT / "lib"),
                "-w",
                tmp,
            ],
            check=True,
        )
        (wheel,) = Path(tmp).glob("meshplan-*.whl")
        shutil.copy2(wheel, out / wheel.name)
    shutil.rmtree(ROOT / "lib" / "build", ignore_errors=True)  # setuptools' scratch folder
    py = static / "pyodide"
    shutil.rmtree(py, ignore_errors=True)
    py.mkdir()
    for f in RUNTIME:
        shutil.copy2(PYODIDE / f, py / f)
    version = json.loads((PYODIDE / "package.json").read_text())["version"]
    manifest = {
        "wheel": wheel.name,
        "wheel_bytes": (out / wheel.name).stat().st_size,
        "pyodide": version,
        "pyodide_bytes": {f: (py / f).stat().st_size for f in RUNTIME},
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest


if __name__ == "__main__":
    m = build(Path(sys.argv[1] if len(sys.argv) > 1 else ROOT / "_build" / "html"))
    total = m["wheel_bytes"] + sum(m["pyodide_bytes"].values())
    print(f"planner assets: {m['wheel']} ({m['wheel_bytes']:,} B), Pyodide {m['pyodide']} ({total:,} B in all)")
