#!/usr/bin/env bash
# Re-execute every notebooks/*.ipynb in place from a fresh kernel with the venv's
# Jupyter, then drop run-specific metadata (metadata.widgets: stale widget state that
# would make the book page load widget scripts) while keeping outputs and execution
# counts. Strict `pytest --nbval` compares against exactly these stored outputs.
#
#   make venv && scripts/save_notebooks.sh [notebooks/NN_name.ipynb ...]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

VENV=${VENV:-.venv}
if [ ! -x "$VENV/bin/jupyter" ]; then
  echo "save_notebooks: $VENV/bin/jupyter not found; run 'make venv' first" >&2
  exit 1
fi

if [ "$#" -gt 0 ]; then
  notebooks=("$@")
else
  shopt -s nullglob
  notebooks=(notebooks/*.ipynb)
fi
if [ "${#notebooks[@]}" -eq 0 ]; then
  echo "save_notebooks: no notebooks to run" >&2
  exit 0
fi

for nb in "${notebooks[@]}"; do
  echo "save_notebooks: executing $nb"
  "$VENV/bin/jupyter" nbconvert --to notebook --execute --inplace \
    --ExecutePreprocessor.timeout=120 \
    --ExecutePreprocessor.kernel_name=python3 \
    "$nb"
done

# Keeps outputs and execution counts; strips metadata.widgets, metadata.signature and
# per-cell run metadata (ExecuteTime, execution, collapsed, scrolled, ...).
"$VENV/bin/nbstripout" --keep-output --keep-count "${notebooks[@]}"

# Each figure's alt text in the book: the text/plain its kernel displayed (meshplan.course.plotting.describe, which
# reads the figure's own title, axes and legend) becomes the cell's mystnb.image.alt, the option myst-nb writes into
# the <img alt>; otherwise the alt is the image's file name (tests/test_figure_alt.py).
"$VENV/bin/python" scripts/figure_alt.py "${notebooks[@]}"
echo "save_notebooks: saved ${#notebooks[@]} notebook(s)"
