"""The evolution map (meshplan.course.evolution): every number of every stage asserted to its printed digit, the
texts carrying them, the shape of the map (main line, branches, chapters), other settings and models, and the errors.

GB = 1e9 B; the lab page's sizes (s = 4,096, b = 1, 80 GB GPUs, 8 per node, NVLink 160 GB/s, IB 50 GB/s,
400 TFLOP/s effective) unless a test says otherwise.
"""

from __future__ import annotations

import json
import re
import string
from pathlib import Path

import pytest

from meshplan import load_hardware, load_model
from meshplan.course import evolution
from meshplan.course.evolution import STAGES, Setting, break_even_tokens, flow_html, rows, stage

REPO = Path(__file__).resolve().parents[1]
P = 27_781_427_952  # the anchor's parameters, from its config (tests/test_params.py pins it)


@pytest.fixture(scope="module")
def lab_rows():
    return rows()


def texts(row) -> dict[str, str]:
    return {k: v.text for k, v in row.numbers.items()}


# ------------------------------------------------------------------------------------ each stage, digit by digit
EXPECTED_NUMBERS = {
    1: {
        "bpp": "16 B",
        "params": "27,781,427,952",
        "states": "444.5 GB",
        "gpu_memory": "80 GB",
        "states_over_gpu": "5.6",
        "gpu_hours": "2,664K",
        "gpu_years": "304",
    },
    2: {
        "gpus": "8",
        "gpus_large": "64",
        "ring": "97.2 GB",
        "ring_large": "109.4 GB",
        "naive": "388.9 GB",
        "naive_large": "3,500 GB",
        "states": "444.5 GB",
    },
    3: {
        "bucket": "25 MiB",
        "ring": "97.2 GB",
        "ib": "50 GB/s",
        "t_comm": "1.94 s",
        "tokens": "4,096",
        "flops": "400 TFLOP/s",
        "t_backward": "1.05 s",
        "verdict": "too few tokens to hide it",
    },
    4: {
        "ladder": "444.5 → 152.8 → 104.2 → 55.6 GB",
        "gpus": "8",
        "zero3_ratio": "1.5×",
        "seq": "4,096",
        "act_selective": "45.6 GB",
        "left": "24.4 GB",
        "verdict": "does not fit in",
    },
    5: {
        "tp": "8",
        "act_selective": "45.6 GB",
        "act_tp": "5.7 GB",
        "tp_bytes": "18.8 GB",
        "tokens": "4,096",
        "zero_tflops": "5 TFLOP/s",
    },
    6: {
        "boundary": "41.9 MB",
        "p": "8",
        "m": "32",
        "v": "4",
        "bubble": "21.9 %",
        "bubble_share": "17.9 %",
        "bubble_interleaved": "5.5 %",
    },
    7: {"zb_share": "1/3", "copies": "2", "copies_v": "1"},
    8: {
        "long_seq": "131,072",
        "tokens": "16",
        "ranks": "4",
        "contiguous": "10 : 26 : 42 : 58",
        "zigzag": "34 : 34 : 34 : 34",
        "kv_layer": "0.5 GB",
        "cp": "8",
        "model": "the anchor",
        "kv_heads": "4",
        "ulysses_max": "4",
    },
    9: {
        "expert_params": "654B",
        "ep": "64",
        "experts_per_gpu": "4",
        "max_nodes": "4",
        "ib": "50 GB/s",
        "nvlink": "160 GB/s",
        "link_ratio": "3.2",
        "comp_comm": "1:1",
    },
    10: {
        "llama_dims": "8 × 1 × 16 × 128",
        "llama_gpus": "16,384",
        "llama_mfu": "41 %",
        "ds_pp": "16",
        "ds_ep": "64",
        "ds_zero": "1",
        "ds_tp": "no TP",
        "ds_gpus": "2,048",
    },
}


@pytest.mark.parametrize("number", sorted(EXPECTED_NUMBERS))
def test_every_number_to_its_printed_digit(lab_rows, number):
    assert texts(lab_rows[number - 1]) == EXPECTED_NUMBERS[number]


EXPECTED_NUMBER_COLUMN = [
    "444.5 GB = 5.6 × 80 GB; ≈ 304 GPU-years",
    "444.5 GB on every GPU, whatever N",
    "1.94 s of all-reduce against a 1.05 s backward",
    "45.6 GB of activations against 24.4 GB left",
    "18.8 GB per 4,096 tokens per GPU, blocking every layer",
    "21.9 % (17.9 % of the step); v = 4: 5.5 %",
    "2 copies of the parameters",
    "0.5 GB of K and V per layer; 4 KV heads",
    "50 GB/s against 160 GB/s; compute : communication ≈ 1:1",
    "no universal plan: Llama 3 8 × 1 × 16 × 128, DeepSeek-V3 PP 16 × EP 64 with no TP",
]


def test_the_number_column(lab_rows):
    assert [r.number for r in lab_rows] == EXPECTED_NUMBER_COLUMN


def test_every_text_prints_the_numbers_of_its_template(lab_rows):
    """What each stage solved, where it got stuck and the figure's short form carry their template's numbers, each
    asserted to its digit above; their wording is the book's to change."""
    for r in lab_rows:
        st = r.stage
        for template, text in ((st.solved, r.solved), (st.stuck, r.stuck), (st.number_template, r.number)):
            assert text.strip() and "{" not in text, (st.number, text)
            for _, name, _, _ in string.Formatter().parse(template):
                if name:
                    assert r.numbers[name].text in text, (st.number, name)


# -------------------------------------------------------------------- the values behind the texts, independently
def test_values_against_first_principles(lab_rows):
    v = {r.stage.number: {k: n.value for k, n in r.numbers.items()} for r in lab_rows}
    assert v[1]["states"] == 16 * P
    assert v[2]["ring"] == pytest.approx(2 * 7 / 8 * 2 * P)
    assert v[2]["ring_large"] == pytest.approx(2 * 63 / 64 * 2 * P)
    assert v[2]["naive_large"] == 63 * 2 * P
    assert v[3]["t_comm"] == pytest.approx(2 * 7 / 8 * 2 * P / 50e9)
    anchor = load_model("qwen3.8-27b")
    assert v[3]["t_backward"] == pytest.approx(4 * anchor.flop_params * 4096 / 400e12)
    assert v[3]["t_comm"] > v[3]["t_backward"]
    assert v[4]["left"] == pytest.approx(80e9 - 16 * P / 8)
    assert v[4]["act_selective"] > v[4]["left"]
    assert v[4]["zero3_ratio"] == pytest.approx(1.5)
    assert v[6]["bubble"] == 7 / 32 and v[6]["bubble_share"] == 7 / 39 and v[6]["bubble_interleaved"] == 7 / 128
    assert v[7]["zb_share"] == pytest.approx(1 / 3)
    assert v[8]["kv_layer"] == 131_072 * 2 * 4 * 256 * 2 * 7 / 8  # K and V, 4 heads × 256, bf16, (c−1)/c
    assert v[9]["expert_params"] == 58 * 256 * 3 * 7168 * 2048  # MoE layers × experts × 3 matrices × h × ffn
    assert v[10]["llama_dims"] == 16_384


def test_every_template_field_has_a_number_and_every_number_is_printed():
    s = Setting.create()
    for st in STAGES:
        numbers = st.compute(s)
        assert st.fields_used() == set(numbers), st.number


def test_each_number_names_its_library_call(lab_rows):
    for r in lab_rows:
        for name, n in r.numbers.items():
            assert n.how.strip(), (r.stage.number, name)


# ------------------------------------------------------------------------------------------------- the map's shape
def test_main_line_and_branches():
    assert [s.number for s in STAGES] == list(range(1, 11))
    assert evolution.MAIN_LINE == (1, 2, 3, 4, 5, 6, 7, 10)
    assert evolution.BRANCHES == (8, 9)
    assert stage(8).branch == "long sequences" and stage(9).branch == "mixture of experts"


def test_chapters_exist_and_follow_the_course():
    chapters = [(s.number, s.chapter_number, s.chapter) for s in STAGES]
    assert chapters == [
        (1, 1, "01_one_gpu"),
        (2, 2, "02_data_parallel"),
        (3, 2, "02_data_parallel"),
        (4, 3, "03_zero_fsdp"),
        (5, 4, "04_tensor_parallel"),
        (6, 5, "05_pipeline_parallel"),
        (7, 5, "05_pipeline_parallel"),
        (8, 6, "06_context_parallel"),
        (9, 7, "07_expert_parallel"),
        (10, 8, "08_4d_lab"),
    ]
    for s in STAGES:
        assert (REPO / "notebooks" / f"{s.chapter}.ipynb").is_file(), s.chapter
        assert s.chapter.startswith(f"{s.chapter_number:02d}_")


def test_every_stage_cites_years_papers_and_engines():
    for s in STAGES:
        assert s.years and s.papers and s.engines, s.number
        for paper in s.papers:
            assert re.search(r"(19|20)\d\d", paper.cite), paper  # each paper with its year
            assert paper.ref and paper.about, paper
    assert "§3.2" in stage(3).papers[0].cite and "Table 1" in stage(1).papers[1].cite
    assert "Table 4" in stage(10).papers[1].cite and stage(10).papers[1].ref == "arXiv:2407.21783"


def test_sources_and_references_name_every_paper_and_engine(lab_rows):
    for r in lab_rows:
        st = r.stage
        assert r.sources.startswith(f"{st.years}: ") and all(p.cite in r.sources for p in st.papers), st.number
        assert all(p.text in r.references for p in st.papers), st.number
        assert r.references.endswith(f"Engines: {', '.join(st.engines)}."), st.number


# ---------------------------------------------------------------------------------------------------- the figure
def test_flow_html_draws_every_stage_with_its_number(lab_rows):
    page = flow_html(lab_rows)
    items = re.findall(r'<li class="mp-evo-stage( mp-evo-branch)?" data-stage="(\d+)">', page)
    assert [(bool(b), int(n)) for b, n in items] == [(n in (8, 9), n) for n in range(1, 11)]
    for r in lab_rows:
        assert f"stuck:</b> {r.number.replace('&', '&amp;')}</div>" in page
        assert r.stage.title in page
    assert "branch: long sequences" in page and "branch: mixture of experts" in page
    # each card links to its chapter, the built site's page beside the map's, and that page exists in the book
    links = re.findall(r'<a class="mp-evo-link" href="([^"]+)\.html">chapter (\d+)</a>', page)
    assert links == [(r.stage.chapter, str(r.stage.chapter_number)) for r in lab_rows]
    toc = (Path(__file__).resolve().parents[1] / "_toc.yml").read_text(encoding="utf-8")
    assert all(f"notebooks/{chapter}\n" in toc for chapter, _ in links)
    assert "<script" not in page
    sizes = [int(x) for x in re.findall(r"font-size:(\d+)px", page)]
    assert sizes and min(sizes) >= 11


# ------------------------------------------------------------------------------------------- the exercise's formula
def test_break_even_tokens():
    t = break_even_tokens("qwen3.8-27b", 8, 50e9, 400e12)
    assert round(t) == 7589
    anchor = load_model("qwen3.8-27b")
    assert t == pytest.approx(2 * 7 / 8 * 2 * P / 50e9 / (4 * anchor.flop_params / 400e12))
    # 3.2× the bandwidth hides the same bytes in 3.2× fewer tokens; N only moves 2(N−1)/N
    assert break_even_tokens("qwen3.8-27b", 8, 160e9, 400e12) == pytest.approx(t / 3.2)
    assert break_even_tokens("qwen3.8-27b", 1024, 50e9, 400e12) / t == pytest.approx((1023 / 1024) / (7 / 8))
    assert break_even_tokens("qwen3.8-27b", 1, 50e9, 400e12) == 0


# ------------------------------------------------------------------------------- other settings, models, errors
def test_another_setting_moves_the_numbers():
    r = rows(Setting.create(gpus=16, pp=4, micro_batches=16))
    n = {row.stage.number: texts(row) for row in r}
    assert n[2]["ring"] == f"{2 * 15 / 16 * 2 * P / 1e9:.1f} GB" == "104.2 GB"
    assert n[4]["ladder"].endswith(f"{16 * P / 16 / 1e9:.1f} GB")
    assert n[6]["bubble"] == "18.8 %"  # 3/16


def test_longer_sequences_and_a_small_model_get_the_other_verdicts():
    long = {row.stage.number: texts(row) for row in rows(Setting.create(seq=4 * 4096))}
    assert (long[3]["t_backward"], long[3]["t_comm"]) == ("4.20 s", "1.94 s")
    assert long[3]["verdict"] == "enough tokens to hide it"
    small = rows(Setting.create("small-3.7m"))
    n = {row.stage.number: texts(row) for row in small}
    assert n[4]["verdict"] == "fits in"
    assert n[8]["model"] == load_model("small-3.7m").name
    assert small[3].stuck.endswith("which fits in the " + n[4]["left"] + " left.")


def test_another_model_and_hardware():
    spec = load_model("llama-3.1-8b")
    r = rows(Setting.create(spec, load_hardware("lab")))
    assert r[0].numbers["states"].value == 16 * spec.params.total
    assert r[7].numbers["kv_heads"].text == str(spec.num_key_value_heads)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"gpus": 0}, "gpus=0 must be a positive integer"),
        ({"seq": True}, "seq=True must be a positive integer"),
        ({"pp": 2.5}, "pp=2.5 must be a positive integer"),
        ({"gpu": 8}, "unknown size 'gpu'"),
        ({"hardware": "h100-sxm-80gb"}, "hardware 'h100-sxm-80gb' has no effective FLOP/s"),
        ({"model": "no-such-model"}, "no-such-model"),
    ],
)
def test_bad_settings_name_the_factor(kwargs, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        Setting.create(**kwargs)


def test_an_unknown_stage():
    with pytest.raises(ValueError, match=re.escape("stage=11 must be one of 1, 2, 3, 4, 5, 6, 7, 8, 9, 10")):
        stage(11)


def test_a_template_without_its_number():
    st = stage(1)
    with pytest.raises(ValueError, match="stage 1 \\(One GPU\\) has no number 'gpu_years'"):
        evolution.render(st, {k: v for k, v in st.compute(Setting.create()).items() if k != "gpu_years"})


# ------------------------------------------------------------------------------------------------------ the page
def test_the_map_page_glues_every_row_and_links_every_chapter():
    nb = json.loads((REPO / "notebooks" / "00_evolution_map.ipynb").read_text(encoding="utf-8"))
    md = "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown")
    code = "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code")
    for s in STAGES:
        parts = (
            ("title", "md"),
            ("solved", "md"),
            ("stuck", "md"),
            ("number", "text"),
            ("sources", "md"),
            ("refs", "md"),
        )
        for part, role in parts:
            assert f"{{glue:{role}}}`s{s.number}_{part}`" in md, (s.number, part)
        assert f"]({s.chapter}.ipynb)" in md, s.chapter
    assert "evolution.rows(setting)" in code and "evolution.flow_html(ROWS)" in code
    assert "this course's order" in md
    # no number typed by hand in the prose: every digit sits in a glue role, a link, a year or a "chapter N" label
    allowed = (
        r"\$[^$]+\$",  # math
        r"\{glue:\w+\}`[^`]+`",  # glued
        r"\[chapter \d+\]\([^)]+\)|\]\([^)]+\)",  # links
        r"\b(19|20)\d\d\b",  # years
        r"Qwen3\.8-27B|Llama 3|DeepSeek-V3",  # names
    )
    prose = re.sub("|".join(allowed), "", md)
    assert not re.findall(r"\d", prose), re.findall(r".{20}\d.{20}", prose)


def test_the_map_page_tags_its_plumbing():
    nb = json.loads((REPO / "notebooks" / "00_evolution_map.ipynb").read_text(encoding="utf-8"))
    cells = [c for c in nb["cells"] if c["cell_type"] == "code"]
    visible = [c for c in cells if not {"remove-cell", "remove-input"} & set(c["metadata"].get("tags", []))]
    assert len(visible) <= 5
    for c in cells:
        src = "".join(c["source"])
        if "glue(" in src or "def explain" in src:
            assert "remove-cell" in c["metadata"].get("tags", []), src[:60]


def test_the_map_exercise_default_is_not_printed_above_it():
    nb = json.loads((REPO / "notebooks" / "00_evolution_map.ipynb").read_text(encoding="utf-8"))
    before: list[str] = []
    shown: list[str] = []
    for c in nb["cells"]:
        if '"map-hide-allreduce"' in "".join(c["source"]):
            before = shown
            break
        shown.append("".join(c["source"]))
        for out in c.get("outputs", []):
            data = out.get("data", {})
            shown += ["".join(data.get("text/plain", "")), "".join(data.get("text/html", ""))]
    assert before, "the exercise is on the page"
    hw = load_hardware("lab")
    assert hw.effective_flop_per_s is not None  # the lab preset states it
    default = break_even_tokens("qwen3.8-27b", 4, hw.nvlink_bytes_per_s, hw.effective_flop_per_s)  # NVLink, N = 4
    assert f"{default:,.0f}" == "2,033"
    assert f"{default:,.0f}" not in "\n".join(before) and f"{default:.0f}" not in "\n".join(before)


def test_one_row_for_a_chapter(lab_rows):
    for n in range(1, 11):
        assert stage(n).number == n
        assert evolution.row(n) == lab_rows[n - 1]
    other = Setting.create(pp=4, micro_batches=16)
    assert evolution.row(6, other).numbers["bubble"].text == "18.8 %"
