"""`make lab` is a first-class way to take the course: JupyterLab starts on 127.0.0.1, chapter 1 runs top to
bottom without an error, and its exercises are live widgets that call the library.

The test runs the Makefile's own `lab` recipe in a scratch folder that holds a copy of chapter 1 (JupyterLab saves
what it runs, and the committed notebook must stay as it is) and a link to the repository's .venv. Headless
Chromium then drives JupyterLab as a learner would: Run All, move the slider of an exercise, type a prediction,
press Enter and Check, and read the graded answer. Every request the page makes outside the server is aborted and
recorded. Takes about a minute (server start, kernel, chapter 1).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
from browser import shared_chromium

REPO_ROOT = Path(__file__).resolve().parents[1]
CHAPTER = "notebooks/01_one_gpu.ipynb"
VENV = REPO_ROOT / ".venv"
STAMP = ".venv/.requirements.stamp"  # the Makefile's: never reinstall the venv from a test

# JupyterLab settings for the test: no news or update checks (no network here), every cell kept in the page.
LAB_SETTINGS = {
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {"fetchNews": "false", "checkForUpdates": False},
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """`make lab` serving a scratch copy of chapter 1; yields (base URL, token)."""
    if not (VENV / "bin" / "jupyter-lab").exists():
        pytest.fail(f"{VENV}/bin/jupyter-lab missing: run `make venv` (jupyterlab is pinned in requirements.txt)")
    work = tmp_path_factory.mktemp("lab")
    (work / "notebooks").mkdir()
    shutil.copy(REPO_ROOT / CHAPTER, work / CHAPTER)
    (work / ".venv").symlink_to(VENV)
    settings = work / "jupyter" / "lab-settings"
    for name, values in LAB_SETTINGS.items():
        path = settings / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(values), encoding="utf-8")
    port, token = _free_port(), secrets.token_hex(16)
    env = {
        **os.environ,
        "JUPYTER_CONFIG_DIR": str(work / "jupyter" / "config"),
        "JUPYTER_RUNTIME_DIR": str(work / "jupyter" / "runtime"),
        "JUPYTERLAB_SETTINGS_DIR": str(settings),
        "JUPYTERLAB_WORKSPACES_DIR": str(work / "jupyter" / "workspaces"),
        "IPYTHONDIR": str(work / "ipython"),
        "MPLCONFIGDIR": str(work / "matplotlib"),
        "MESHPLAN_STATIC": "1",  # `make lab` must unset it: the exercises are to be live widgets
    }
    args = (
        f"--no-browser --port={port} --ServerApp.port_retries=0 --IdentityProvider.token={token} "
        "--LabApp.expose_app_in_browser=True"
    )
    with open(work / "lab.log", "w") as log:
        proc = subprocess.Popen(
            [
                "make",
                "-s",
                "-f",
                str(REPO_ROOT / "Makefile"),
                "-C",
                str(work),
                "-o",
                STAMP,
                "lab",
                f"LAB_NOTEBOOK={CHAPTER}",
                f"LAB_ARGS={args}",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
        base = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 90
            while True:
                if proc.poll() is not None:
                    pytest.fail(f"`make lab` exited with {proc.returncode}:\n{(work / 'lab.log').read_text()[-3000:]}")
                try:
                    req = urllib.request.Request(f"{base}/api/status", headers={"Authorization": f"token {token}"})
                    with urllib.request.urlopen(req, timeout=2) as response:
                        if response.status == 200:
                            break
                except OSError:
                    pass
                if time.monotonic() > deadline:
                    pytest.fail(f"JupyterLab did not answer on {base}:\n{(work / 'lab.log').read_text()[-3000:]}")
                time.sleep(0.5)
            yield base, token
        finally:
            with contextlib.suppress(ProcessLookupError):  # the group this fixture started: make, jupyter, kernels
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)


@pytest.fixture(scope="module")
def notebook(lab):
    """Chapter 1 open in JupyterLab in headless Chromium, after Run All."""
    base, token = lab
    blocked: list[str] = []
    # the process's one Chromium (browser.py): Playwright's sync API allows one instance per thread
    context = shared_chromium().new_context(viewport={"width": 1366, "height": 900})

    def route(r) -> None:
        if r.request.url.startswith(base):
            r.continue_()
        else:
            blocked.append(r.request.url)
            r.abort()

    context.route("**/*", route)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(f"{base}/lab/tree/{CHAPTER}?token={token}", wait_until="load")
    page.wait_for_function(
        f"""() => window.jupyterapp && window.jupyterapp.shell.currentWidget
             && window.jupyterapp.shell.currentWidget.context
             && window.jupyterapp.shell.currentWidget.context.path === {json.dumps(CHAPTER)}""",
        timeout=60_000,
    )
    started = time.monotonic()
    run = page.evaluate("""async () => {
      const panel = window.jupyterapp.shell.currentWidget;
      await panel.sessionContext.ready;
      const ok = await window.jupyterapp.commands.execute('notebook:run-all-cells');
      const cells = panel.content.model.cells;
      const code = [], errors = [];
      for (let i = 0; i < cells.length; i++) {
        const cell = cells.get(i);
        if (cell.type !== 'code') continue;
        code.push(cell.executionCount);
        for (const output of cell.outputs.toJSON())
          if (output.output_type === 'error') errors.push(`cell ${i}: ${output.ename}: ${output.evalue}`);
      }
      return {ok, code, errors, kernel: panel.sessionContext.session.kernel.name};
    }""")
    run["seconds"] = time.monotonic() - started
    yield page, run
    context.close()
    assert blocked == [], f"JupyterLab asked for something outside 127.0.0.1: {blocked[:5]}"
    assert errors == [], f"JavaScript errors in JupyterLab: {errors}"


def test_chapter_1_runs_top_to_bottom_in_jupyterlab(notebook):
    page, run = notebook
    assert run["kernel"] == "python3"
    assert run["errors"] == [], run["errors"]
    assert run["ok"] is True and run["code"] and all(isinstance(n, int) for n in run["code"]), run
    assert page.locator(".jp-OutputArea-output .widget-vbox").count() > 0, "no live widget was rendered"


def _says(text: str) -> str:
    """The library's answer in a feedback line ("... The library says 444.5 GB. ..." -> "444.5 GB")."""
    found = re.search(r"The library says (.+?)\.(?:\s|$)", text)
    assert found, f"no answer in {text!r}"
    return found.group(1)


def test_an_exercise_is_live_move_a_slider_type_a_prediction_check_it(notebook):
    page, _ = notebook
    check_button = page.get_by_role("button", name="Check", exact=True)
    exercise = (
        page.locator(".jp-OutputArea-output .widget-vbox")
        .filter(has=page.locator(".widget-hslider"))
        .filter(has=check_button)
        .first
    )
    exercise.scroll_into_view_if_needed()
    slider = exercise.locator(".widget-hslider").first
    readout = slider.locator(".widget-readout")
    prediction = exercise.locator(".widget-text input").first
    check = exercise.get_by_role("button", name="Check", exact=True)
    answer = exercise.locator(".widget-html").last

    def feedback_for(typed: str) -> str:
        """The feedback for ``typed``: waits for a graded answer other than the one shown before (the kernel answers
        asynchronously, and the previous answer already says "The library says"). The answer is found afresh at each
        look (JupyterLab may re-attach a cell's output nodes), and Check is pressed again every 15 s (grading is
        idempotent), so a click lost while the machine is loaded costs a retry, not the test."""
        shown = answer.inner_text()
        prediction.fill(typed)
        prediction.press("Enter")  # commits the value (and submits, where the widget grades on Enter)
        check.click()
        deadline = time.monotonic() + 90
        pressed = time.monotonic()
        while True:
            now = answer.inner_text()
            if now != shown and "The library says" in now:
                return now
            if time.monotonic() > deadline:
                kernel = page.evaluate(
                    "() => window.jupyterapp.shell.currentWidget.sessionContext.session?.kernel?.status ?? 'none'"
                )
                pytest.fail(
                    f"no graded answer for {typed!r} in 90 s: the kernel is {kernel!r}, the prediction box holds "
                    f"{prediction.input_value()!r}, the answer reads {now!r} (before: {shown!r})"
                )
            if time.monotonic() - pressed > 15:
                check.click()
                pressed = time.monotonic()
            page.wait_for_timeout(200)

    # An empty prediction never gets the answer.
    prediction.fill("")
    if check.is_enabled():
        check.click()
        page.wait_for_timeout(500)
        assert "The library says" not in answer.inner_text()

    before = feedback_for("1")
    position = readout.inner_text()
    handle = slider.locator(".noUi-handle").first
    at_end = handle.get_attribute("aria-valuenow") == handle.get_attribute("aria-valuemax")
    handle.focus()
    handle.press("ArrowLeft" if at_end else "ArrowRight")
    page.wait_for_function(
        "([el, old]) => el.innerText !== old", arg=[readout.element_handle(), position], timeout=5_000
    )
    after = feedback_for("1")
    assert readout.inner_text() != position, "the slider did not move"
    assert _says(after) != _says(before), f"moving the slider did not change the answer: {after!r}"

    exact = _says(after)
    number = re.match(r"[−-]?[\d,]*\.?\d+", exact)
    assert number, exact
    right = feedback_for(number.group(0).replace(",", "").replace("−", "-"))
    assert "✓" in right, right
    wrong = feedback_for(str(10 * float(number.group(0).replace(",", "").replace("−", "-")) + 1))
    assert "✓" not in wrong, wrong
