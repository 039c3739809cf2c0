"""The fault-injection hooks (ocrcli/faults.py) are armed only with OCRCLI_ENABLE_FAULTS=1,
read once into the run's settings, and recorded in summary.json when armed."""

from __future__ import annotations

import json

import pytest

from ocrcli.errors import UsageError
from ocrcli.faults import NO_FAULTS, Faults
from ocrcli.settings import ConvertSettings
from tests.conftest import SAMPLES, run_cli

INHERITED = {"OCRCLI_FAULT_UNREADABLE": ".pdf", "OCRCLI_FAULT_RENDER_HANG": "1",
             "OCRCLI_FAULT_OOM_ROWS_OVER": "0", "OCRCLI_FAULT_ENOSPC_AFTER": "0"}


def test_fault_variables_without_the_switch_arm_nothing():
    assert Faults.from_env(INHERITED) is NO_FAULTS
    assert Faults.from_env(INHERITED | {"OCRCLI_ENABLE_FAULTS": "0"}) is NO_FAULTS
    assert NO_FAULTS.armed == {}


def test_the_switch_arms_the_variables_that_are_set():
    faults = Faults.from_env({"OCRCLI_ENABLE_FAULTS": "1", "OCRCLI_FAULT_UNREADABLE": ".pdf",
                              "OCRCLI_FAULT_STEP_DELAY": "0.5", "OCRCLI_FAULT_OOM_AT_STEP": "3"})
    assert faults == Faults(unreadable=".pdf", step_delay_s=0.5, oom_at_step=3)
    assert faults.armed == {"OCRCLI_FAULT_OOM_AT_STEP": 3, "OCRCLI_FAULT_STEP_DELAY": 0.5,
                            "OCRCLI_FAULT_UNREADABLE": ".pdf"}
    with pytest.raises(PermissionError):
        faults.check_readable("report.pdf")
    faults.check_readable("memo.jpg")


def test_a_malformed_value_is_refused_not_ignored():
    with pytest.raises(UsageError, match="OCRCLI_FAULT_OOM_AT_STEP='three'"):
        Faults.from_env({"OCRCLI_ENABLE_FAULTS": "1", "OCRCLI_FAULT_OOM_AT_STEP": "three"})


def test_settings_read_the_environment_once_when_they_are_made(monkeypatch):
    monkeypatch.setenv("OCRCLI_ENABLE_FAULTS", "1")
    monkeypatch.setenv("OCRCLI_FAULT_ENOSPC_AFTER", "2")
    settings = ConvertSettings(inputs=[], out=SAMPLES)
    monkeypatch.delenv("OCRCLI_FAULT_ENOSPC_AFTER")
    assert settings.faults == Faults(enospc_after=2)  # kept: nothing reads it again
    assert ConvertSettings(inputs=[], out=SAMPLES).faults == NO_FAULTS


def test_inherited_fault_variables_do_not_touch_a_real_run(tmp_path):
    """An OCRCLI_FAULT_UNREADABLE=.pdf left in a shell would fail every PDF with a genuine-
    looking 'Permission denied' (and RENDER_HANG=1 would hang): without the switch, every
    page of the samples converts."""
    out = tmp_path / "out"
    r = run_cli("convert", str(SAMPLES), "-o", str(out), "-q", "--accept", "truncated,degenerate",
                env=INHERITED, timeout=600)
    assert r.returncode == 0, r.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["documents_failed"] == 0 and summary["pages"]["failed"] == 0
    assert summary["pages"]["converted"] == 6  # every page of samples/
    assert "injected_faults" not in summary and "Permission denied" not in r.stderr


def test_armed_faults_act_and_are_recorded_in_the_summary(tmp_path):
    out = tmp_path / "out"
    r = run_cli("convert", str(SAMPLES / "report.pdf"), "-o", str(out),
                env={"OCRCLI_ENABLE_FAULTS": "1", "OCRCLI_FAULT_UNREADABLE": ".pdf"})
    assert r.returncode == 1, r.stderr
    assert "injected faults are armed (OCRCLI_FAULT_UNREADABLE=.pdf)" in r.stderr
    assert "cannot read the file: Permission denied" in r.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["injected_faults"] == {"OCRCLI_FAULT_UNREADABLE": ".pdf"}
