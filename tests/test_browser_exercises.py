"""Chapter 1 in the built site (headless Chromium, file://, network blocked): the model-states exercises.

The answers the page shows were computed by the library when the book was built; these tests compute the same
answers with the library now and compare them with what the page shows after moving a control, skipping the
prediction ("Show me") or typing one. The parts every exercise shares (no answer before a prediction, Enter,
no sideways scroll) are checked on every page by ``test_browser_smoke.py``.
"""

from __future__ import annotations

import pytest
from browser import DESKTOP, PHONE, choose, chosen, predict, site_page, skip_prediction, toc_files

from meshplan import MEGATRON_BPP, Plan, evaluate, load_model
from meshplan.parallel import zero
from meshplan.widgets import Result, compare

CH1 = "notebooks/01_one_gpu.html"


def _states_gb(model: str, gpus: int) -> float:
    return evaluate(Plan.create(model, gpus=gpus, zero=3)).memory_bytes["model_states"] / 1e9


def test_chapter1_controls_show_the_library_answer():
    with site_page(CH1) as page:
        ex = page.locator("#mp-ex-ch1-floor")
        ex.scroll_into_view_if_needed()
        assert chosen(ex, "gpus") == "16"  # not the 8-GPU floor the chapters print
        assert (
            skip_prediction(ex)
            == f"You skipped the prediction. The library says {_states_gb('qwen3.8-27b', 16):.1f} GB."
        )

        slider = ex.locator('input.mp-slider[data-name="gpus"]')
        slider.focus()
        page.keyboard.press("ArrowLeft")  # 16 -> 12: a node and a half, planned (a partly filled last node)
        assert chosen(ex, "gpus") == "12"
        assert ex.locator(".mp-answer").inner_text() == "" and not ex.locator(".mp-show").is_disabled()
        assert skip_prediction(ex).endswith(f"The library says {_states_gb('qwen3.8-27b', 12):.1f} GB.")

        slider.focus()  # Show me took the focus
        page.keyboard.press("ArrowRight")
        page.keyboard.press("ArrowRight")  # 12 -> 16 -> 32
        assert ex.locator(".mp-answer").inner_text() == ""
        answer = predict(ex, "20")
        value = _states_gb("qwen3.8-27b", 32)
        assert answer[0] == compare("20", Result(value, f"{value:,.1f} GB"), unit="GB", digits=1)
        assert f"{value:.1f} GB" in answer[0] and "−" not in answer[0]
        assert ex.locator(".mp-explanation").inner_text()  # the worked answer follows


def test_chapter1_fewest_gpus_names_the_conventions():
    """The bytes-per-parameter choice is a pair of radio buttons that say whose convention each size is."""
    with site_page(CH1) as page:
        ex = page.locator("#mp-ex-ch1-fewest-gpus")
        ex.scroll_into_view_if_needed()
        options = ex.locator('.mp-radio[data-name="bytes_per_param"] .mp-option')
        assert options.all_inner_texts() == ["16 B: lab page, DeepSpeed, FSDP2", "18 B: Megatron-LM"]
        assert chosen(ex, "bytes_per_param") == "18 B: Megatron-LM"
        assert chosen(ex, "model") == "Llama 3.1 405B"
        params = load_model("llama-3.1-405b").params.total
        assert skip_prediction(ex) == (
            f"You skipped the prediction. The library says {zero.min_gpus_for_states(params, 80e9, MEGATRON_BPP)} GPUs."
        )
        choose(ex, "bytes_per_param", "16 B: lab page, DeepSpeed, FSDP2")
        choose(ex, "model", "Qwen3.8-27B (anchor)")
        n = zero.min_gpus_for_states(load_model("qwen3.8-27b").params.total, 80e9)
        assert predict(ex, "6", enter=True)[0] == compare("6", Result(n, f"{n} GPUs"), unit="GPUs", digits=0)
        assert "✓" in predict(ex, str(n))[0]


# Each exercise's default answer (what "Show me" reveals) must not be readable anywhere within one screen height of
# the widget, above or below, before the reader predicts: text in a closed "Show code cell outputs" toggle is not
# on the screen. Answers with fewer than two digits ("2 heads", "8 GPUs") are everywhere and are not checked.
LEAK_JS = r"""(vh) => {
  const out = [];
  for (const ex of document.querySelectorAll('.mp-exercise')) {
    const show = ex.querySelector('.mp-show'), a = ex.querySelector('.mp-answer');
    if (show.disabled) continue;
    show.click();
    const line = a.firstChild ? a.firstChild.textContent : '';
    const m = line.match(/The library says (.*)\.$/);
    const ans = m ? m[1] : '';
    a.textContent = '';
    if (ans.replace(/[^0-9]/g, '').length < 2) continue;
    const r = ex.getBoundingClientRect(), top = r.top + scrollY, bottom = r.bottom + scrollY;
    const walker = document.createTreeWalker(document.querySelector('.bd-article'), NodeFilter.SHOW_TEXT);
    let n;
    while ((n = walker.nextNode())) {
      if (ex.contains(n) || !n.textContent.includes(ans)) continue;
      const el = n.parentElement;
      if (!el || el.closest('script, style')) continue;
      if (!el.checkVisibility({contentVisibilityAuto: true, opacityProperty: true, visibilityProperty: true})) continue;
      const range = document.createRange();
      range.selectNodeContents(n);
      const rr = range.getBoundingClientRect();
      if (!rr.height) continue;
      const y = rr.top + scrollY;
      const dist = y > bottom ? y - bottom : (rr.bottom + scrollY < top ? top - rr.bottom - scrollY : 0);
      if (dist < vh) out.push(`${ex.id}: ${ans} ${y > bottom ? 'below' : 'above'} at ${Math.round(dist)} px`);
    }
  }
  return out;
}"""


@pytest.mark.parametrize("viewport", [DESKTOP, PHONE], ids=["desktop", "phone"])
def test_no_exercise_shows_its_answer_within_a_screen(viewport):
    leaks = []
    for name in toc_files():
        with site_page(f"{name}.html", viewport=viewport) as page:
            leaks += [f"{name}: {x}" for x in page.evaluate(LEAK_JS, viewport["height"])]
    assert leaks == []
