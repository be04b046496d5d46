"""``meshplan calibrate`` (issue 25): the step-time model fitted to a reader's own runs, written as a hardware file
that ``--hardware`` takes. Synthetic runs priced with known constants must give those constants back, predict each
other held out, and make ``plan --hardware FILE`` print the fit's step time; bad input gets one line and exit 2."""

from __future__ import annotations

import contextlib
import io
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from meshplan.cli import main
from meshplan.core.schemas import check
from meshplan.plan import Plan, evaluate
from meshplan.spec.hardware import CALIBRATION_RANGES, load_hardware
from meshplan.steptime import calibration, step_time
from meshplan.steptime.calibrate import CalibrationError, calibrate, read_runs
from meshplan.steptime.model import PHYSICAL_RANGES

H100 = "h100-sxm-80gb"
PLANS: list[dict[str, Any]] = [
    {"id": "8b-fsdp8", "model": "llama-3.1-8b", "gpus": 8, "zero": 3, "accounting": "fsdp2", "seq": 8192,
     "global_batch": 32, "recompute": "full"},
    {"id": "8b-tp2-dp8", "model": "llama-3.1-8b", "gpus": 16, "tp": 2, "zero": 1, "accounting": "megatron",
     "seq": 8192, "global_batch": 64},
    {"id": "70b-tp4-pp4", "model": "llama-3.1-70b", "gpus": 64, "tp": 4, "pp": 4, "zero": 1, "accounting": "megatron",
     "seq": 8192, "global_batch": 128},
    {"id": "30b-a3b-ep8", "model": "qwen3-30b-a3b", "gpus": 32, "ep": 8, "zero": 1, "accounting": "megatron",
     "seq": 4096, "global_batch": 128},
    {"id": "70b-dp16-ib", "model": "llama-3.1-70b", "gpus": 128, "tp": 8, "zero": 3, "accounting": "fsdp2",
     "seq": 8192, "global_batch": 128, "recompute": "full"},
]  # fmt: skip


def _seconds(run: dict, cal, hardware=H100) -> float:
    fields = {k: v for k, v in run.items() if k not in ("id", "step_time_s", "tokens_per_s")}
    from meshplan.spec.accounting import get_accounting

    plan = Plan.create(hardware=hardware, stage_balance=get_accounting(fields["accounting"]).stage_balance, **fields)
    return step_time(evaluate(plan), None, cal).total_s


def _cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


def _write(tmp_path: Path, runs: list[dict], busbw: dict | None = None, name: str = "runs.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps({"runs": runs, **({"busbw": busbw} if busbw else {})}), encoding="utf-8")
    return path


def test_the_fit_gives_back_the_constants_the_runs_were_priced_with(tmp_path):
    truth = replace(calibration(), matmul_efficiency=0.55)
    runs = [{**r, "step_time_s": _seconds(r, truth)} for r in PLANS]
    fit, _ = calibrate(_write(tmp_path, runs), H100)
    assert fit.constants.matmul_efficiency == pytest.approx(0.55, abs=2e-4)
    s = {k: v or 0.0 for k, v in fit.summary().items()}
    assert s["held_out_max"] < 0.002 and s["fitted_max"] < 0.002  # consistent runs predict each other held out
    assert s["stored_median"] > 0.05  # and the stored constants did not


def test_two_constants_from_runs_that_tell_them_apart(tmp_path):
    truth = replace(calibration(), matmul_efficiency=0.6, link_efficiency=0.5)
    runs = [{**r, "step_time_s": _seconds(r, truth)} for r in PLANS]
    fit, _ = calibrate(_write(tmp_path, runs), H100, ("matmul_efficiency", "link_efficiency"))
    assert fit.constants.matmul_efficiency == pytest.approx(0.6, abs=0.01)
    assert fit.constants.link_efficiency == pytest.approx(0.5, abs=0.02)
    assert (fit.summary()["held_out_max"] or 0.0) < 0.02


def test_the_written_file_is_a_hardware_file_plan_prices_as_the_fit_did(tmp_path):
    truth = replace(calibration(), matmul_efficiency=0.5)
    runs = [{**r, "step_time_s": _seconds(r, truth)} for r in PLANS[:3]]
    out = tmp_path / "mine.json"
    code, text, err = _cli("calibrate", "--runs", str(_write(tmp_path, runs)), "--hardware", H100, "--output",
                           str(out))  # fmt: skip
    assert (code, err) == (0, "")
    assert "held out (leave one out)" in text and f"wrote {out}" in text
    doc = json.loads(out.read_text())
    check(doc, "hardware", "the calibrated file")  # the schema takes what calibrate writes
    hw = load_hardware(str(out))
    assert dict(hw.calibration)["matmul_efficiency"] == pytest.approx(0.5, abs=2e-4)
    base = load_hardware(H100)
    assert hw.nvlink_bytes_per_s == base.nvlink_bytes_per_s and hw.gpu_memory_bytes == base.gpu_memory_bytes
    r = PLANS[1]
    argv: list[str] = ["plan", "--model", r["model"], "--gpus", "16", "--tp", "2", "--zero", "1",
                       "--accounting", "megatron", "--seq", "8192", "--global-batch", "64", "--json"]  # fmt: skip
    mine = json.loads(_cli(*argv, "--hardware", str(out))[1])
    stock = json.loads(_cli(*argv, "--hardware", H100)[1])
    assert mine["step_time_s"] == pytest.approx(r["step_time_s"] if "step_time_s" in r else runs[1]["step_time_s"])
    assert mine["memory_bytes"] == stock["memory_bytes"]  # only the step time is calibrated


def test_busbw_becomes_the_links_with_efficiency_one(tmp_path):
    runs = [{**r, "step_time_s": 1.0 + i} for i, r in enumerate(PLANS[:3])]
    path = _write(tmp_path, runs, busbw={"nvlink": 360, "infiniband": 42.5})
    fit, busbw = calibrate(path, H100)
    assert busbw == {"nvlink": 360e9, "infiniband": 42.5e9}
    assert (fit.hardware.nvlink_bytes_per_s, fit.hardware.infiniband_bytes_per_s) == (360e9, 42.5e9)
    assert fit.constants.link_efficiency == 1.0
    out = tmp_path / "mine.json"
    assert _cli("calibrate", "--runs", str(path), "--hardware", H100, "--output", str(out))[0] == 0
    doc = json.loads(out.read_text())
    assert doc["nvlink_bytes_per_s"]["value"] == 360e9 and "nccl-tests" in doc["nvlink_bytes_per_s"]["source"]
    assert doc["step_time_calibration"]["link_efficiency"]["value"] == 1.0


def test_csv_and_tokens_per_s_read_as_json_and_step_time(tmp_path):
    truth = replace(calibration(), matmul_efficiency=0.62)
    rows = PLANS[:3]
    secs = [_seconds(r, truth) for r in rows]
    plans = [Plan.create(hardware=H100, **{k: v for k, v in r.items() if k != "id"}) for r in rows]
    lines = ["id,model,gpus,tp,pp,zero,accounting,seq,global_batch,recompute,tokens_per_s"]
    for r, s, p in zip(rows, secs, plans, strict=True):
        lines.append(f"{r['id']},{r['model']},{r['gpus']},{r.get('tp', 1)},{r.get('pp', 1)},{r['zero']},"
                     f"{r['accounting']},{r['seq']},{r['global_batch']},{r.get('recompute', 'none')},"
                     f"{p.tokens_per_step / s!r}")  # fmt: skip
    path = tmp_path / "runs.csv"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    fit, _ = calibrate(path, H100)
    assert fit.constants.matmul_efficiency == pytest.approx(0.62, abs=2e-4)


def test_a_config_path_is_read_beside_the_runs_file(tmp_path):
    src = Path(__file__).resolve().parents[1] / "lib" / "meshplan" / "data" / "models" / "llama-3.1-8b.json"
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "config.json").write_text(src.read_text())
    runs = [{"model": "mine/config.json", "gpus": 8, "zero": 3, "step_time_s": 2.0}]
    read, _, _ = read_runs(_write(tmp_path, runs), load_hardware(H100))
    assert read[0].plan.model.name == "mine"


BAD = [
    ([{"model": "llama-3.1-8b", "gpus": 8, "step_time_s": 2.0}], "1 run(s) for 1 constant(s): give at least 2"),
    ([{"model": "llama-3.1-8b", "gpus": 8, "step_s": 2.0}] * 2, "unknown field 'step_s'"),
    ([{"model": "llama-3.1-8b", "gpus": 8, "step_time_s": 2.0, "tokens_per_s": 9.0}] * 2,
     "give one of step_time_s or tokens_per_s"),
    ([{"model": "llama-3.1-8b", "gpus": 8, "step_time_s": -2}] * 2, "step_time_s=-2 must be a positive number"),
    ([{"model": "llama-3.1-8b", "gpus": "eight", "step_time_s": 2}] * 2, "gpus='eight' must be an integer"),
    ([{"model": "llama-3.1-8b", "gpus": 8, "tp": 3, "step_time_s": 2}] * 2, "does not divide gpus=8"),
    ([{"gpus": 8, "step_time_s": 2}] * 2, "model and gpus are required"),
]  # fmt: skip


@pytest.mark.parametrize(("runs", "message"), BAD, ids=[m.split(":")[0][:30] for _, m in BAD])
def test_bad_runs_get_one_line_naming_the_field(tmp_path, runs, message):
    code, out, err = _cli("calibrate", "--runs", str(_write(tmp_path, runs)), "--output", str(tmp_path / "o.json"))
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1 and message in err, err
    assert not (tmp_path / "o.json").exists()


def test_bad_options_get_one_line(tmp_path):
    runs = _write(tmp_path, [{"model": "llama-3.1-8b", "gpus": 8, "step_time_s": 2.0}] * 3)
    for argv, message in (
        (["--fit", "speed"], "--fit 'speed': name one or more of matmul_efficiency"),
        (["--output", str(tmp_path)], "is a directory"),
        (["--output", str(tmp_path / "nowhere" / "x.json")], "does not exist"),
    ):
        full = ["calibrate", "--runs", str(runs), *(["--output", str(tmp_path / "o.json")] if "--output" not in argv
                                                     else []), *argv]  # fmt: skip
        code, _, err = _cli(*full)
        assert code == 2 and len(err.strip().splitlines()) == 1 and message in err, err
    with pytest.raises(CalibrationError, match="invalid JSON"):
        bad = tmp_path / "bad.json"
        bad.write_text("{", encoding="utf-8")
        calibrate(bad, H100)


def test_the_hardware_file_refuses_calibration_outside_its_ranges(tmp_path):
    assert CALIBRATION_RANGES == PHYSICAL_RANGES  # one set of physical ranges, in two layers
    doc = json.loads((Path(__file__).resolve().parents[1] / "lib/meshplan/data/hardware" / f"{H100}.json").read_text())
    doc["step_time_calibration"] = {"matmul_efficiency": {"value": 1.5, "source": "x"}}
    path = tmp_path / "hw.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(ValueError, match="matmul_efficiency"):
        load_hardware(str(path))
