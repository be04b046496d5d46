"""GB200 NVL72: an NVLink domain of 72 GPUs (``gpus_per_node``) driven by hosts of 4 (``gpus_per_host``). Plans see
the domain (which groups use NVLink), the launch commands the hosts (``torchrun --nproc_per_node``, DeepSpeed's
slots); a job may fill part of a rack as long as it fills whole hosts."""

from __future__ import annotations

import subprocess
import sys

import pytest

from meshplan.export import export_text, megatron
from meshplan.plan import Plan, evaluate
from meshplan.plan.reporting import format_report
from meshplan.search import search
from meshplan.spec.hardware import Hardware, load_hardware
from meshplan.spec.mesh import launch_hosts

GB200 = "gb200-nvl72-186gb"


def test_the_preset_is_one_rack_of_hosts_of_four():
    hw = load_hardware(GB200)
    assert (hw.gpus_per_node, hw.gpus_per_host, hw.host_gpus) == (72, 4, 4)
    assert hw.gpu_memory_bytes == 186e9 and hw.device_total_bytes is None
    assert (hw.peak_bf16_flop_per_s, hw.peak_fp8_flop_per_s, hw.peak_mxfp8_flop_per_s) == (2.5e15, 5e15, 5e15)
    assert "tyche_ngpu72" in hw.source("gpus_per_host")
    # a host smaller than the domain is the exception: the HGX/DGX presets' hosts are their nodes
    assert load_hardware("h100-sxm-80gb").gpus_per_host is None
    assert load_hardware("h100-sxm-80gb").host_gpus == 8


def test_groups_inside_the_rack_use_nvlink_across_hosts():
    plan = Plan.create(
        "llama-3.1-70b", gpus=144, tp=8, pp=2, zero=1, hardware=GB200, accounting="megatron", order="tp-cp-dp-pp"
    )
    report = evaluate(plan)
    # a TP group of 8 spans two hosts of 4 and TP × DP = 72 fills the rack: both on its NVLink; PP joins the racks
    assert report.link["tp"] == report.link["dp"] == "nvlink"
    assert report.link["pp"] == "infiniband"
    on_hgx = evaluate(plan.replace(hardware=load_hardware("b200-sxm-180gb")))
    assert on_hgx.link["dp"] == "infiniband"  # on 8-GPU nodes the DP group crosses them
    assert "72 per node (NVLink domain), 4 per host" in format_report(report)


def test_the_launch_counts_hosts_not_racks():
    plan = Plan.create("llama-3.1-70b", gpus=144, tp=8, zero=1, hardware=GB200)
    run = megatron(plan).torchrun
    assert run[:3] == ["torchrun", "--nnodes=36", "--nproc_per_node=4"]
    # part of a rack, whole hosts: 100 GPUs are 25 hosts (the plan notes the partly filled domain)
    part = Plan.create("llama-3.1-70b", gpus=100, tp=4, zero=1, hardware=GB200)
    assert megatron(part).torchrun[:3] == ["torchrun", "--nnodes=25", "--nproc_per_node=4"]
    assert any("holds only 28" in n for n in evaluate(part).notes)
    text = export_text(Plan.create("llama-3.1-8b", gpus=8, zero=1, hardware=GB200), "deepspeed")
    assert "2 host(s) of 4: slots=4 in DeepSpeed's hostfile" in text
    with pytest.raises(ValueError, match=r"^gpus=102 fill 25 host\(s\) of 4 and 2 GPUs of another"):
        export_text(Plan.create("llama-3.1-70b", gpus=102, tp=2, zero=1, hardware=GB200), "megatron")
    assert launch_hosts(2, 4, 72) == (1, 2)  # fewer GPUs than a host: one host, that many processes


def test_host_overrides_are_validated_and_kept_apart_from_the_domain():
    hw = load_hardware(GB200)
    with pytest.raises(ValueError, match=r"^gpus_per_host=5 does not divide gpus_per_node=72"):
        hw.with_overrides(gpus_per_host=5)
    with pytest.raises(ValueError, match=r"^gpus_per_host=0 must be a positive integer"):
        Hardware(gpus_per_node=8, gpus_per_host=0)
    assert hw.with_overrides(gpus_per_node=8).host_gpus == 4  # 4 still divides the new domain
    assert hw.with_overrides(gpus_per_node=6).host_gpus == 6  # it does not: hosts of the whole domain
    assert hw.with_overrides(gpus_per_node=8, gpus_per_host=2).host_gpus == 2
    # Plan.replace applies both overrides (each on the other's result)
    plan = Plan.create("llama-3.1-8b", gpus=16, hardware=GB200).replace(gpus_per_node=8, gpus_per_host=2)
    assert (plan.gpus_per_node, plan.gpus_per_host) == (8, 2)
    b200 = Plan.create("llama-3.1-8b", gpus=16, hardware="b200-sxm-180gb", gpus_per_node=72, gpus_per_host=4)
    assert megatron(b200).torchrun[:3] == ["torchrun", "--nnodes=4", "--nproc_per_node=4"]


def test_the_command_line_takes_gpus_per_host_and_refuses_in_one_line():
    def run(*args):
        return subprocess.run([sys.executable, "-m", "meshplan", *args], capture_output=True, text=True)

    base = ("--model", "llama-3.1-70b", "--gpus", "144", "--tp", "8", "--zero", "1", "--hardware", GB200)
    out = run("export", "--format", "megatron", *base, "--gpus-per-host", "2")
    assert out.returncode == 0 and "--nnodes=72 --nproc_per_node=2" in out.stdout
    for bad, expected in (
        ("5", "meshplan: error: gpus_per_host=5 does not divide gpus_per_node=72"),
        ("0", "meshplan: error: argument --gpus-per-host"),
    ):
        out = run("plan", *base, "--gpus-per-host", bad)
        assert out.returncode == 2 and out.stdout == ""
        assert out.stderr.startswith(expected) and out.stderr.count("\n") == 1, out.stderr


def test_search_on_a_rack_keeps_tp_inside_the_domain():
    result = search("llama-3.1-70b", 144, 4096, 144, hardware=GB200, accounting="megatron")
    assert result.ranked and {c.plan.gpus_per_host for c in result.ranked} == {4}
    assert max(c.plan.tp for c in result.ranked) <= 72
    assert any(c.plan.tp > 8 for c in result.ranked) or all(
        r.constraint != "tp inside a node" or r.settings["tp"] > 72 for r in result.rejected
    )
