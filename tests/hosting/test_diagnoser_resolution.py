"""Resolving --diagnoser specs: entry-point names, module:attr, cmd:, and the errors for everything else."""

from __future__ import annotations

from importlib.metadata import EntryPoint

import pytest

from diageval.hosting import registry
from diageval.hosting.registry import DiagnoserSpecError, list_diagnosers, resolve_diagnoser

BUILT_INS = {"null", "prior", "oracle", "leak"}


def test_entry_point_names_resolve_to_the_built_ins():
    for name in BUILT_INS:
        r = resolve_diagnoser(name)
        assert (r.name, r.kind, r.origin, r.reference) == (name, "in_process", "built-in", True)
        assert r.self_test == (name == "oracle")
        assert callable(r.factory().diagnose)


def test_unknown_name_suggests_the_closest():
    with pytest.raises(DiagnoserSpecError, match="Did you mean null"):
        resolve_diagnoser("nul")
    with pytest.raises(DiagnoserSpecError, match="Did you mean oracle"):
        resolve_diagnoser("orcale")
    with pytest.raises(DiagnoserSpecError, match="unknown diagnoser 'zzzzzz'") as err:
        resolve_diagnoser("zzzzzz")
    assert "Did you mean" not in str(err.value)


def test_import_string_resolves_and_bad_ones_explain_why():
    r = resolve_diagnoser("diageval.diagnosers.reference:NullDiagnoser")
    assert (r.name, r.origin, r.kind) == ("null", "import diageval.diagnosers.reference", "in_process")
    with pytest.raises(DiagnoserSpecError, match="did you mean NullDiagnoser"):
        resolve_diagnoser("diageval.diagnosers.reference:NulDiagnoser")
    with pytest.raises(DiagnoserSpecError, match="cannot import module"):
        resolve_diagnoser("no_such_module_xyz:Thing")
    with pytest.raises(DiagnoserSpecError, match="not a diagnoser"):
        resolve_diagnoser("diageval.fileio:sha256_text")


def test_import_string_loads_only_the_requested_module():
    r = resolve_diagnoser("fake_diagnosers:ScriptedDiagnoser")
    assert (r.name, r.reference) == ("scripted", False)


def test_cmd_specs_name_the_program_and_version_the_command():
    a = resolve_diagnoser("cmd:python tools/my_diag.py {bundle} {out}")
    b = resolve_diagnoser("cmd:python tools/my_diag.py --fast {bundle} {out}")
    assert a.kind == "command" and a.name == "cmd-my_diag" and a.origin == "command" and not a.reference
    assert a.version != b.version
    assert resolve_diagnoser("cmd:/opt/hta-check {bundle}").name == "cmd-hta-check"
    with pytest.raises(DiagnoserSpecError, match="needs a command"):
        resolve_diagnoser("cmd:   ")


def test_list_shows_built_ins_and_reports_load_errors_without_crashing(monkeypatch):
    real = registry.diagnoser_entry_points()
    fake = dict(real)
    group = registry.ENTRY_POINT_GROUP
    fake["unavailable"] = [EntryPoint("unavailable", "fake_diagnosers:UnavailableDiagnoser", group)]
    fake["broken"] = [EntryPoint("broken", "no_such_module_xyz:Thing", group)]
    monkeypatch.setattr(registry, "diagnoser_entry_points", lambda: fake)
    rows = {r.name: r for r in list_diagnosers()}
    assert BUILT_INS <= set(rows)
    assert all(rows[n].available and rows[n].origin == "built-in" and rows[n].reference for n in BUILT_INS)
    assert rows["oracle"].self_test and not rows["null"].self_test
    assert "DiagnoserUnavailable" in rows["unavailable"].error and "nothere" in rows["unavailable"].error
    assert "ModuleNotFoundError" in rows["broken"].error


def test_resolving_one_name_loads_no_other_entry_point(monkeypatch):
    real = registry.diagnoser_entry_points()
    fake = dict(real)
    fake["broken"] = [EntryPoint("broken", "no_such_module_xyz:Thing", registry.ENTRY_POINT_GROUP)]
    monkeypatch.setattr(registry, "diagnoser_entry_points", lambda: fake)
    assert resolve_diagnoser("null").name == "null"
    with pytest.raises(DiagnoserSpecError, match="failed to load"):
        resolve_diagnoser("broken")
