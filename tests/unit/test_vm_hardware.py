"""The VM agent's hardware check (trainer/launchers/vm/hardware.py): what it refuses and what it lets train."""

from __future__ import annotations

import pytest

from stacks.targets.gcp.gpus import IMAGE_MIN_DRIVER
from trainer.launchers.vm import hardware
from trainer.launchers.vm.hardware import Hardware, problem


def test_the_agent_and_the_gpu_catalogue_need_the_same_driver():
    assert hardware.MIN_DRIVER == IMAGE_MIN_DRIVER


@pytest.mark.parametrize(
    ("found", "expected", "wanted"),
    [
        (Hardware(0, "570.172.08"), 1, "NVIDIA driver 570.172.08 on this VM is older than the 580"),
        (Hardware(1, "535.230.02"), 1, "older than the 580"),  # a driver CUDA 13 cannot use, even with devices seen
        (Hardware(1, None), 2, "sees 1 of the 2 GPU(s)"),
        (Hardware(0, "580.95.05"), 1, "sees 0 of the 1 GPU(s) this node was created with (driver 580.95.05)"),
    ],
)
def test_problems_name_what_was_found_and_the_setting(found, expected, wanted):
    text = problem(found, expected)
    assert text and wanted in text and "defaults.gcp.gpu_driver" in text


@pytest.mark.parametrize("found", [Hardware(1, "580.95.05"), Hardware(8, "590.1"), Hardware(2, "580.65.06")])
def test_a_node_with_its_gpus_under_a_new_driver_trains(found):
    assert problem(found, found.gpus) is None


def test_the_probe_reads_nvidia_smi_from_the_cos_mount(tmp_path, monkeypatch):
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho '570.172.08'\necho '570.172.08'\n")
    smi.chmod(0o755)
    monkeypatch.setattr(hardware, "NVIDIA_BIN_DIRS", (str(tmp_path),))
    monkeypatch.delenv(hardware.PROBE_ENV, raising=False)
    monkeypatch.setattr(hardware, "_torch_gpus", lambda: 0)
    assert hardware.probe() == Hardware(0, "570.172.08")
