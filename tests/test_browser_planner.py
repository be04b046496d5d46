"""The live planner (book/planner.md, issue 27) in the built site, served by a plain static server on 127.0.0.1 with
every other address blocked: for shipped models and for configs written by transformers and pasted as a reader
would, the page's JSON is byte for byte what ``meshplan plan --json`` prints for the same inputs; search and export
print what the command line prints; a malformed config or an impossible cut shows the command line's one-line
message in place of the result; the settings travel in the link, never the config; the page reads at 390 px and in
dark mode, works from the keyboard, and under ``file://`` says in one line how to serve it."""

from __future__ import annotations

import contextlib
import functools
import http.server
import io
import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from browser import DESKTOP, PHONE, SITE_DIR, horizontal_overflow, require_site, shared_chromium, site_url

from meshplan.cli import main

PAGE = "book/planner.html"
LOAD_TIMEOUT_MS = 180_000


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:  # the test's output, not the server's
        pass


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    require_site(PAGE)
    require_site("_static/planner/manifest.json")
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(SITE_DIR)))
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}/"
    finally:
        srv.shutdown()
        srv.server_close()


@contextlib.contextmanager
def _context(origin: str, **options):
    """A fresh context where every request outside ``origin`` is aborted and recorded (``.blocked``)."""
    context = shared_chromium().new_context(service_workers="block", **options)
    blocked: list[str] = []

    def route(r) -> None:
        if r.request.url.startswith(origin):
            r.continue_()
        else:
            blocked.append(r.request.url)
            r.abort()

    context.route("**/*", route)
    context.blocked = blocked
    try:
        yield context
    finally:
        context.close()


@pytest.fixture(scope="module")
def planner(server):
    """One page of the planner, loaded once (the runtime's first load is the slow part), shared by the tests."""
    with _context(server, viewport=DESKTOP) as context:
        context.grant_permissions(["clipboard-read", "clipboard-write"], origin=server.rstrip("/"))
        page = context.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.goto(server + PAGE)
        yield page
        assert errors == []
        assert context.blocked == []


def _cli(argv: list[str], files: dict[str, str] | None = None, cwd: Path | None = None) -> tuple[int, str, str]:
    """The command line, in this process, as the page runs it: (status, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.ExitStack() as stack:
        if cwd is not None:
            for rel, text in (files or {}).items():
                path = cwd / rel
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(text, encoding="utf-8")
            stack.enter_context(contextlib.chdir(cwd))
        stack.enter_context(contextlib.redirect_stdout(out))
        stack.enter_context(contextlib.redirect_stderr(err))
        try:
            code = main(argv)
        except SystemExit as exc:
            code = int(exc.code or 0)
    return code, out.getvalue(), err.getvalue()


FIELDS = (
    "gpus",
    "hardware",
    "accounting",
    "precision",
    "tp",
    "cp",
    "pp",
    "ep",
    "dp",
    "zero",
    "recompute",
    "virtual-stages",
    "seq",
    "micro-batch-size",
    "global-batch",
)
DEFAULTS = {
    "gpus": "8",
    "hardware": "",
    "accounting": "",
    "precision": "bf16",
    "tp": "1",
    "cp": "1",
    "pp": "1",
    "ep": "1",
    "dp": "",
    "zero": "0",
    "recompute": "none",
    "virtual-stages": "1",
    "seq": "4096",
    "micro-batch-size": "1",
    "global-batch": "",
}


def _set(page, model: str = "", config: str | None = None, name: str = "my-model", flags: tuple = (), **values):
    """Fill the form as a reader would: every field from DEFAULTS overridden by ``values`` (keys with _ for -)."""
    settings = DEFAULTS | {k.replace("_", "-"): str(v) for k, v in values.items()}
    if config is not None:
        page.fill("#planner-config", config)
        page.fill("#planner-name", name)
    page.select_option("#planner-model", model)
    for field in FIELDS:
        node = page.locator(f"#planner-{field}")
        if node.evaluate("n => n.tagName") == "SELECT":
            node.select_option(settings[field])
        else:
            node.fill(settings[field])
    for flag in ("uneven-stages", "no-sp"):
        page.locator(f"#planner-{flag}").set_checked(flag in flags)
    return settings


def _argv(settings: dict, model: str, flags: tuple = ()) -> list[str]:
    """The command line a reader types for these settings (written here, not read from the page)."""
    args = ["--model", model]
    for field in FIELDS:
        value = settings[field]
        if value != DEFAULTS[field] or field == "gpus":
            args += [f"--{field}", value]
    return args + [f"--{f}" for f in flags]


def _press(page, button: str, out: str) -> None:
    """Press a button and wait until its run has come back (the output or the error changed)."""
    page.evaluate("() => { window.__plannerRuns = window.plannerTimings.runs.length }")
    errors_before = page.locator("#planner-error").text_content()
    page.click(f"#planner-{button}")
    page.wait_for_function(
        "([out, before]) => !document.getElementById('planner-run').disabled && ("
        "window.plannerTimings.runs.length > window.__plannerRuns || "
        "document.getElementById('planner-error').textContent !== before && "
        "!document.getElementById('planner-error').hidden)",
        arg=[out, errors_before],
        timeout=LOAD_TIMEOUT_MS,
    )


def _transformers_config(kind: str) -> str:
    """A config.json as transformers writes it (``to_json_string``: what save_pretrained puts on disk)."""
    transformers = pytest.importorskip("transformers")
    if kind == "llama":
        cfg = transformers.LlamaConfig(
            hidden_size=2048,
            intermediate_size=5632,
            num_hidden_layers=22,
            num_attention_heads=32,
            num_key_value_heads=4,
            vocab_size=32000,
            max_position_embeddings=2048,
        )  # TinyLlama-1.1B's shape
    elif kind == "qwen3_moe":
        cfg = transformers.Qwen3MoeConfig(
            hidden_size=1024,
            intermediate_size=3072,
            moe_intermediate_size=384,
            num_hidden_layers=12,
            num_attention_heads=16,
            num_key_value_heads=4,
            num_experts=32,
            num_experts_per_tok=4,
            vocab_size=50000,
            head_dim=64,
        )
    else:
        cfg = transformers.Qwen3Config(
            hidden_size=2560,
            intermediate_size=9728,
            num_hidden_layers=36,
            num_attention_heads=32,
            num_key_value_heads=8,
            vocab_size=151936,
            head_dim=128,
            tie_word_embeddings=True,
        )  # Qwen3-4B's shape
    return cfg.to_json_string()


SHIPPED = [
    ("llama-3.1-8b", {"gpus": 8, "zero": 3}, ()),
    (
        "qwen3.8-27b",
        {
            "gpus": 64,
            "tp": 4,
            "pp": 4,
            "zero": 1,
            "recompute": "selective",
            "hardware": "h100-sxm-80gb",
            "accounting": "megatron",
            "global_batch": 256,
            "virtual_stages": 2,
        },
        (),
    ),
    (
        "qwen3-30b-a3b",
        {
            "gpus": 32,
            "ep": 8,
            "tp": 2,
            "zero": 1,
            "hardware": "h100-sxm-80gb",
            "accounting": "megatron",
            "precision": "fp8",
            "seq": 8192,
        },
        (),
    ),
    (
        "llama-3.1-70b",
        {
            "gpus": 64,
            "tp": 8,
            "cp": 2,
            "zero": 3,
            "accounting": "fsdp2",
            "hardware": "h200-sxm-141gb",
            "recompute": "op",
            "seq": 32768,
            "micro_batch_size": 1,
        },
        (),
    ),
    (
        "deepseek-v3",
        {"gpus": 256, "pp": 8, "ep": 32, "zero": 1, "hardware": "h800-sxm-80gb", "accounting": "megatron"},
        ("uneven-stages",),
    ),
    ("small-3.7m", {"gpus": 4, "tp": 2, "accounting": "deepspeed", "zero": 2}, ("no-sp",)),
]


@pytest.mark.parametrize(("model", "values", "flags"), SHIPPED, ids=[m for m, _, _ in SHIPPED])
def test_shipped_model_json_equals_the_cli(planner, model, values, flags):
    settings = _set(planner, model=model, flags=flags, **values)
    _press(planner, "run", "json")
    argv = _argv(settings, model, flags)
    assert planner.text_content("#planner-command") == "meshplan plan " + " ".join([*argv, "--json"])
    code, out, err = _cli(["plan", *argv, "--json"])
    assert (code, err) == (0, "")
    assert planner.text_content("#planner-json") == out.rstrip("\n")
    assert json.loads(planner.text_content("#planner-json"))["model"] == model
    code, text, _ = _cli(["plan", *argv])
    assert planner.text_content("#planner-report") == text.rstrip("\n")
    assert planner.locator("#planner-error").is_hidden()


PASTED = [
    ("llama", "tinyllama", {"gpus": 8, "tp": 2, "zero": 1, "hardware": "a100-sxm-80gb", "accounting": "megatron"}),
    ("qwen3_moe", "small-moe", {"gpus": 16, "ep": 4, "zero": 1, "hardware": "h100-sxm-80gb", "global_batch": 64}),
    ("qwen3", "qwen3-4b", {"gpus": 8, "zero": 3, "accounting": "fsdp2", "hardware": "h100-sxm-80gb", "seq": 8192}),
]


@pytest.mark.parametrize(("kind", "name", "values"), PASTED, ids=[n for _, n, _ in PASTED])
def test_pasted_config_json_equals_the_cli(planner, tmp_path, kind, name, values):
    config = _transformers_config(kind)
    settings = _set(planner, config=config, name=name, **values)
    assert planner.input_value("#planner-model") == ""  # pasting picks "your config.json"
    _press(planner, "run", "json")
    model = f"./{name}/config.json"
    argv = _argv(settings, model)
    code, out, err = _cli(["plan", *argv, "--json"], {model: config}, tmp_path)
    assert (code, err) == (0, "")
    assert planner.text_content("#planner-json") == out.rstrip("\n")
    assert json.loads(out)["model"] == name


def test_search_and_export_print_what_the_cli_prints(planner):
    settings = _set(planner, model="qwen3-30b-a3b", gpus=16, ep=8, zero=1, hardware="h100-sxm-80gb", global_batch=64)
    _press(planner, "search", "search-out")
    code, out, _ = _cli(
        [
            "search",
            "--model",
            "qwen3-30b-a3b",
            "--gpus",
            "16",
            "--hardware",
            "h100-sxm-80gb",
            "--global-batch",
            "64",
            "--top",
            "5",
        ]
    )
    assert code == 0 and planner.text_content("#planner-search-out") == out.rstrip("\n")
    for fmt in ("megatron", "torchtitan", "torchtitan-0.3.0", "deepspeed"):
        planner.select_option("#planner-format", fmt)
        _press(planner, "export", "export-out")
        argv = ["export", "--format", fmt, *_argv(settings, "qwen3-30b-a3b")]
        code, out, err = _cli(argv)
        if code == 0:
            assert planner.text_content("#planner-export-out") == out.rstrip("\n")
            assert planner.locator("#planner-copy").is_visible()
        else:  # the engine's refusal (DeepSpeed has no expert parallel here, say), as the command line words it
            assert planner.text_content("#planner-error") == err.strip().splitlines()[-1]
    planner.select_option("#planner-format", "megatron")
    _press(planner, "export", "export-out")
    planner.click("#planner-copy")  # a secure context (127.0.0.1): the clipboard
    planner.wait_for_function("document.getElementById('planner-status').textContent.startsWith('Copied')")
    assert planner.evaluate("navigator.clipboard.readText()") == planner.text_content("#planner-export-out")


BAD = [
    ("malformed config", {"config": '{"model_type": "llama",\n "hidden_size": 4096'}),
    ("not a config", {"config": '{"model_type": "llama"}'}),
    ("tp does not divide gpus", {"model": "llama-3.1-8b", "tp": 3}),
    ("tp = 0", {"model": "llama-3.1-8b", "tp": 0}),
    ("fp8 on the lab machine", {"model": "llama-3.1-8b", "precision": "fp8"}),
    ("gpus blank", {"model": "llama-3.1-8b", "gpus": ""}),
]


@pytest.mark.parametrize(("what", "values"), BAD, ids=[w for w, _ in BAD])
def test_bad_input_shows_the_cli_message_in_place_of_the_result(planner, tmp_path, what, values):
    values = dict(values)
    config = values.pop("config", None)
    model = values.pop("model", "")
    _set(planner, model="llama-3.1-8b", gpus=8)
    _press(planner, "run", "json")  # a result first: the error must replace it
    assert planner.text_content("#planner-json")
    settings = _set(planner, model=model, config=config, name="bad", **values)
    if config is not None:
        planner.select_option("#planner-model", "")
    _press(planner, "run", "json")
    argv = _argv(settings, model or "./bad/config.json")
    if settings["gpus"] == "":
        argv.remove("--gpus")
        argv.remove("")
    code, out, err = _cli(["plan", *argv, "--json"], {"./bad/config.json": config or ""}, tmp_path)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, err
    assert planner.text_content("#planner-error") == err.strip()
    assert "Traceback" not in planner.text_content("body")
    assert planner.text_content("#planner-json") == "" and planner.text_content("#planner-report") == ""
    assert planner.locator("#planner-error").is_visible()


def test_the_link_carries_the_settings_never_the_config(planner, server):
    config = _transformers_config("llama")
    _set(planner, config=config, name="tinyllama", gpus=16, tp=2, zero=1, hardware="h100-sxm-80gb")
    _press(planner, "run", "json")
    url = planner.url
    assert "#" in url and "hidden_size" not in url and "2048" not in url
    assert all(part in url for part in ("gpus=16", "tp=2", "zero=1", "hardware=h100-sxm-80gb", "name=tinyllama"))
    _set(
        planner,
        model="qwen3.8-27b",
        gpus=64,
        tp=4,
        pp=2,
        zero=3,
        hardware="b200-sxm-180gb",
        precision="mxfp8",
        accounting="megatron",
        seq=8192,
        global_batch=512,
    )
    _press(planner, "run", "json")
    shared = planner.url
    with _context(server, viewport=DESKTOP) as context:
        page = context.new_page()
        page.goto(shared)
        got = {
            f: page.input_value(f"#planner-{f}")
            for f in ("model", "gpus", "tp", "pp", "zero", "hardware", "precision", "accounting", "seq", "global-batch")
        }
        assert got == {
            "model": "qwen3.8-27b",
            "gpus": "64",
            "tp": "4",
            "pp": "2",
            "zero": "3",
            "hardware": "b200-sxm-180gb",
            "precision": "mxfp8",
            "accounting": "megatron",
            "seq": "8192",
            "global-batch": "512",
        }
        assert page.input_value("#planner-config") == ""
        assert context.blocked == []


def test_keyboard_only(planner):
    _set(planner, model="llama-3.1-8b", gpus=8)
    planner.focus("#planner-gpus")
    planner.keyboard.press("Control+A")
    planner.keyboard.type("16")
    planner.keyboard.press("Tab")  # to the hardware select
    assert planner.evaluate("document.activeElement.id") == "planner-hardware"
    planner.keyboard.press("ArrowDown")  # a100-sxm-80gb
    planner.focus("#planner-zero")
    planner.keyboard.press("ArrowDown")  # ZeRO 1
    planner.focus("#planner-seq")
    planner.evaluate("() => { window.__plannerRuns = window.plannerTimings.runs.length }")
    planner.keyboard.press("Enter")  # submits the form: Plan
    planner.wait_for_function("window.plannerTimings.runs.length > window.__plannerRuns", timeout=LOAD_TIMEOUT_MS)
    report = json.loads(planner.text_content("#planner-json"))
    assert (report["gpus"], report["mesh"]["dp"]) == (16, 16)
    assert "--hardware a100-sxm-80gb" in planner.text_content("#planner-command")
    assert "--zero 1" in planner.text_content("#planner-command")
    # every control has a label the screen reader reads
    unlabeled = planner.evaluate(
        "() => [...document.querySelectorAll('#planner input, #planner select, #planner textarea')]"
        ".filter(n => !n.labels || n.labels.length === 0).map(n => n.id)"
    )
    assert unlabeled == []
    assert planner.get_attribute("#planner-status", "role") == "status"


@pytest.mark.parametrize("dark", [False, True], ids=["light", "dark"])
def test_phone_and_dark_mode(server, dark, tmp_path):
    with _context(server, viewport=PHONE, color_scheme="dark" if dark else "light") as context:
        page = context.new_page()
        page.goto(server + PAGE)
        page.evaluate(f"() => document.documentElement.dataset.theme = '{'dark' if dark else 'light'}'")
        page.select_option("#planner-model", "qwen3.8-27b")
        page.fill("#planner-gpus", "64")
        page.fill("#planner-tp", "4")
        page.fill("#planner-pp", "4")
        page.click("#planner-run")
        page.wait_for_function("window.plannerTimings.runs.length > 0", timeout=LOAD_TIMEOUT_MS)
        assert horizontal_overflow(page) == 0  # the report scrolls inside its own box, not the page
        # the form and the report are drawn in the theme's own text and background colours, in both themes
        got = page.evaluate(
            """() => { const rgb = s => getComputedStyle(document.querySelector(s));
              const probe = document.createElement('span'); probe.style.color = 'var(--pst-color-text-base)';
              probe.style.background = 'var(--pst-color-background)'; document.body.appendChild(probe);
              const theme = getComputedStyle(probe);
              return {text: theme.color, bg: theme.backgroundColor, input: rgb('#planner-gpus').color,
                      input_bg: rgb('#planner-gpus').backgroundColor, report: rgb('#planner-report').color}; }"""
        )
        assert got["input"] == got["report"] == got["text"] and got["input_bg"] == got["bg"]
        luminance = sum(int(x) for x in got["text"][got["text"].index("(") + 1 : -1].split(",")[:3])
        assert (luminance > 384) == dark  # light text on dark, dark text on light
        page.screenshot(path=str(tmp_path / f"planner-{'dark' if dark else 'light'}.png"), full_page=False)
        assert context.blocked == []


def test_file_url_says_how_to_serve_it():
    require_site(PAGE)
    context = shared_chromium().new_context(offline=True)
    try:
        page = context.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.goto(site_url(PAGE))
        status = page.text_content("#planner-status")
        assert "http.server" in status and "\n" not in status
        assert page.locator("#planner-run").is_disabled()
        assert errors == []
    finally:
        context.close()
