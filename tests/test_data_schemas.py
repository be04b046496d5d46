"""The data files' JSON Schemas (lib/meshplan/data/schemas/, Draft 2020-12, checked with jsonschema): every schema is
valid and phrases what each field must be, every shipped file it covers validates, and a malformed file is one line
naming the file and the field, with the value."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import pytest

from meshplan.core.resources import data_path, read_json
from meshplan.core.schemas import check, field_name, schema
from meshplan.spec import hardware
from meshplan.spec.hardware import HARDWARE_DIR, load_hardware

SCHEMAS = sorted(p.name.removesuffix(".schema.json") for p in data_path("schemas").glob("*.schema.json"))
# every shipped file each schema describes
FILES = {
    "hardware": sorted(p.relative_to(data_path()).as_posix() for p in HARDWARE_DIR.glob("*.json")),
    "published_runs": ["published_runs.json"],
    "published_peaks": ["published_peaks.json"],
    "memory_overheads": ["memory_overheads.json"],
    "steptime_fit": ["steptime_fit.json"],
}
CONSTRAINTS = {"type", "enum", "const", "minimum", "exclusiveMinimum", "maximum", "pattern", "minLength", "anyOf"}


def _subschemas(node, path=()):
    """Every object-valued node of a schema with its path."""
    if isinstance(node, dict):
        yield path, node
        for k, v in node.items():
            yield from _subschemas(v, (*path, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _subschemas(v, (*path, i))


def test_every_schema_has_its_files():
    assert sorted(FILES) == SCHEMAS
    assert len(FILES["hardware"]) == 7


@pytest.mark.parametrize("name", SCHEMAS)
def test_schema_is_draft_2020_12_and_says_what_each_field_must_be(name):
    s = schema(name)  # checked against the metaschema
    assert s["$schema"] == "https://json-schema.org/draft/2020-12/schema" and s["title"]
    for path, node in _subschemas(s):
        if CONSTRAINTS & set(node):
            assert isinstance(node.get("x-expected"), str), (name, path)


@pytest.mark.parametrize("name, file", [(n, f) for n, files in FILES.items() for f in files])
def test_shipped_file_is_valid(name, file):
    check(read_json(*file.split("/")), name, file)


def test_field_names_read_as_in_the_config_errors():
    assert field_name(["runs", 3, "mesh", "tp"]) == "runs[3].mesh.tp"
    assert field_name([0, "a"]) == "[0].a" and field_name([]) == ""


# ---------------------------------------------------------------- hardware files: one line, the file and the field
def _preset() -> dict:
    return json.loads((HARDWARE_DIR / "h100-sxm-80gb.json").read_text())


def _set(key, value):
    return lambda d: d.__setitem__(key, value)


def _set_value(key, value):
    return lambda d: d[key].__setitem__("value", value)


HARDWARE_CASES = {
    "text": (
        _set_value("peak_bf16_flop_per_s", "x"),
        "'peak_bf16_flop_per_s.value' must be a positive number, got 'x'",
    ),
    "zero": (_set_value("gpu_memory_bytes", 0), "'gpu_memory_bytes.value' must be a positive number, got 0"),
    "bool": (_set_value("nvlink_bytes_per_s", True), "'nvlink_bytes_per_s.value' must be a positive number, got True"),
    "fraction": (_set_value("gpus_per_node", 8.5), "'gpus_per_node.value' must be a positive integer, got 8.5"),
    "missing": (lambda d: d.pop("infiniband_bytes_per_s"), "missing 'infiniband_bytes_per_s'"),
    "no source": (lambda d: d["hbm_bytes_per_s"].pop("source"), "missing 'hbm_bytes_per_s.source'"),
    "bare number": (
        _set("hbm_bytes_per_s", 3e12),
        '\'hbm_bytes_per_s\' must be {"value": ..., "source": ...} or null, got 3000000000000.0',
    ),
    "name": (_set("name", 3), "'name' must be a non-empty string, got 3"),
    # the values' bounds are Hardware's (it checks any Hardware, however built)
    "huge": (
        _set_value("gpu_memory_bytes", 2e15),
        "gpu_memory_bytes=2e+15 is more than 1e+15, beyond any real machine",
    ),
    "infinite": (_set_value("gpu_memory_bytes", float("inf")), "gpu_memory_bytes=inf must be a positive finite number"),
}


@pytest.mark.parametrize("case", HARDWARE_CASES)
def test_malformed_hardware_file_names_the_file_and_the_field(tmp_path: Path, case):
    change, expected = HARDWARE_CASES[case]
    d = _preset()
    change(d)
    path = tmp_path / "hw.json"
    path.write_text(json.dumps(d))
    with pytest.raises(ValueError) as exc:
        load_hardware(str(path))
    assert str(exc.value) == f"malformed hardware file {str(path)!r}: {expected}"


@pytest.mark.parametrize("case", ["text", "missing", "no source", "bare number"])
def test_a_broken_shipped_preset_reads_as_a_broken_file(tmp_path: Path, monkeypatch, case):
    """Shipped presets are checked against the schema only when they fail to load: the message is the same."""
    change, expected = HARDWARE_CASES[case]
    d = _preset()
    change(d)
    name = f"broken-{case.replace(' ', '-')}"
    (tmp_path / f"{name}.json").write_text(json.dumps(d))
    monkeypatch.setattr(hardware, "HARDWARE_DIR", tmp_path)
    with pytest.raises(ValueError) as exc:
        load_hardware(name)
    assert str(exc.value) == f"malformed hardware file {str(tmp_path / f'{name}.json')!r}: {expected}"


def test_planning_with_a_preset_does_not_import_jsonschema():
    code = (
        "import sys; from meshplan import Plan, evaluate; "
        "evaluate(Plan.create('qwen3.8-27b', gpus=8, hardware='h100-sxm-80gb')); print('jsonschema' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False"]


def test_hardware_file_must_be_an_object_and_may_leave_optional_figures_null(tmp_path: Path):
    path = tmp_path / "list.json"
    path.write_text("[1, 2]")
    with pytest.raises(ValueError, match=r"list.json': the file must be a JSON object, got \[1, 2\]$"):
        load_hardware(str(path))
    d = _preset()
    d["hbm_bytes_per_s"] = None
    (tmp_path / "null.json").write_text(json.dumps(d))
    hw = load_hardware(str(tmp_path / "null.json"))
    assert hw.hbm_bytes_per_s is None and hw.source("hbm_bytes_per_s") == ""


# ---------------------------------------------------------------- published runs and the stored fit
def _refused(data, name: str) -> str:
    with pytest.raises(ValueError) as exc:
        check(data, name, "malformed data file 'f.json'")
    msg = str(exc.value)
    assert msg.startswith("malformed data file 'f.json': ") and "\n" not in msg and len(msg) < 300, msg
    return msg.removeprefix("malformed data file 'f.json': ")


def test_malformed_published_runs_name_the_run_and_the_field():
    runs = read_json("published_runs.json")

    def bad(change) -> str:
        d = copy.deepcopy(runs)
        change(d["runs"][3])
        return _refused(d, "published_runs")

    assert (
        bad(lambda r: r["mesh"].__setitem__("tp", 0)) == "'runs[3].mesh.tp' must be a positive integer or null, got 0"
    )
    assert bad(lambda r: r.pop("gpus")) == "missing 'runs[3].gpus'"
    assert bad(lambda r: r.__setitem__("recompute", "partial")) == (
        "'runs[3].recompute' must be 'none', 'selective', 'full' or null, got 'partial'"
    )
    assert bad(lambda r: r["model"].pop("config")).startswith(
        "'runs[3].model' must be an object with the 'name' and one of 'file', 'config' or 'shape', got {'name'"
    )
    metric = bad(lambda r: r["published"]["tflop_per_s_per_gpu"].__setitem__("value", "137"))
    assert metric == "'runs[3].published.tflop_per_s_per_gpu.value' must be a number or a list of numbers, got '137'"


def test_malformed_stored_fit_names_the_field():
    fit = read_json("steptime_fit.json")
    d = copy.deepcopy(fit)
    d["constants"]["hbm_passes"]["value"] = "7.5"
    assert _refused(d, "steptime_fit") == "'constants.hbm_passes.value' must be a number, got '7.5'"
    d = copy.deepcopy(fit)
    d["constants"]["hbm_pases"] = d["constants"].pop("hbm_passes")
    assert _refused(d, "steptime_fit") == "missing 'constants.hbm_passes'"
    d = copy.deepcopy(fit)
    d["constants"]["extra"] = d["constants"]["hbm_passes"]
    assert _refused(d, "steptime_fit") == (
        "unexpected key 'constants.extra' (the keys are matmul_efficiency, hbm_passes, link_efficiency)"
    )
