"""`diageval cases validate`: every broken case is named by file and field, with what was expected."""

from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from diageval.cases.load import load_case_set
from diageval.cases.model import Case
from diageval.cli import main
from diageval.recording.faults import FAULTS

HEALTHY = {
    "id": "tiny-healthy",
    "title": "A healthy control",
    "workload": {"name": "mlp_ddp", "world_size": 2, "steps": 20},
    "faults": [],
    "labels": {"causes": [], "symptoms": [], "expect": "healthy"},
    "tags": ["control"],
}


def positive(**overrides):
    """A valid positive case (DataLoader starvation)."""
    case = {
        **HEALTHY,
        "id": "tiny-positive",
        "faults": [{"name": "dataloader_starvation", "params": {"extra_prep_ms": 50}}],
        "labels": {
            "causes": [{"category": "input.dataloader_starvation", "ranks": [0, 1], "steps": [0, 20]}],
            "symptoms": ["symptom.slow_step"],
            "expect": "diagnose",
        },
        "manifest": {"metric": "step_time_median", "min_ratio": 1.3},
    }
    case.update(overrides)
    return case


def write(tmp_path: Path, data, name="case.yaml") -> Path:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data, sort_keys=False))
    return path


def validate(*paths):
    return CliRunner().invoke(main, ["cases", "validate", *map(str, paths)])


def test_builtin_corpus_is_valid():
    result = validate()
    assert result.exit_code == 0, result.output
    case_set = load_case_set()
    assert len(case_set.cases) >= 12


def test_good_cases_pass(tmp_path):
    result = validate(write(tmp_path, HEALTHY, "a.yaml"), write(tmp_path, positive(), "b.yaml"))
    assert result.exit_code == 0, result.output
    assert "2 valid, 0 invalid" in result.output


@pytest.mark.parametrize(
    "data, field, expected",
    [
        ("id: [unclosed\n", "<file>", "not valid YAML at line"),
        ("- just\n- a list\n", "<file>", "expected a mapping"),
        ({**HEALTHY, "colour": "red"}, "colour", "unknown field"),
        ({**HEALTHY, "id": "Not_Kebab"}, "id", "expected a string matching"),
        ({k: v for k, v in HEALTHY.items() if k != "title"}, "title", "required field is missing"),
        (positive(labels={"causes": [{"category": "gpu.too_hot"}], "expect": "diagnose"}),
         "labels.causes[0].category", "unknown category 'gpu.too_hot'"),
        (positive(labels={"causes": [{"category": "symptom.slow_step"}], "expect": "diagnose"}),
         "labels.causes[0].category", "is a symptom; list it under labels.symptoms"),
        (positive(labels={"causes": [{"category": "input.dataloader_starvation"}],
                          "symptoms": ["compute.straggler_rank"], "expect": "diagnose"}),
         "labels.symptoms[0]", "is a cause; list it under labels.causes"),
        (positive(labels={"causes": [{"category": "compute.straggler_rank", "ranks": [2]}], "expect": "diagnose"}),
         "labels.causes[0].ranks", "rank 2 is out of range for world_size 2"),
        (positive(labels={"causes": [{"category": "input.dataloader_starvation", "steps": [5, 99]}], "expect": "diagnose"}),
         "labels.causes[0].steps", "stop 99 is past the workload's 20 steps"),
        (positive(faults=[{"name": "gremlins", "params": {}}]), "faults[0].name", "unknown fault 'gremlins'; registered:"),
        (positive(faults=[{"name": "dataloader_starvation", "params": {"no_such_param": 3}}]),
         "faults[0].params.no_such_param", "unknown field"),
        ({**HEALTHY, "workload": {"name": "resnet9000", "world_size": 2, "steps": 20}}, "workload.name", "unknown workload"),
        ({**HEALTHY, "workload": {**HEALTHY["workload"], "world_size": 0}}, "workload.world_size", "greater than or equal to 1"),
        (positive(manifest=None), "manifest", "required for expect: diagnose"),
        ({**HEALTHY, "labels": {"causes": [{"category": "input.dataloader_starvation"}], "expect": "healthy"}},
         "labels.causes", "a case with expect: healthy labels no cause"),
    ],
    ids=[
        "bad-yaml", "not-a-mapping", "unknown-field", "bad-id", "missing-field", "unknown-category",
        "symptom-as-cause", "cause-as-symptom", "rank-out-of-range", "steps-past-end", "unknown-fault",
        "bad-fault-param", "unknown-workload", "bad-world-size", "missing-manifest", "healthy-with-cause",
    ],
)
def test_broken_case_names_file_field_and_expectation(tmp_path, data, field, expected):
    path = write(tmp_path, data)
    result = validate(path)
    assert result.exit_code == 1, result.output
    line = next((ln for ln in result.output.splitlines() if ln.startswith(f"{path}: {field}:")), None)
    assert line is not None, f"no line for {path}: {field}:\n{result.output}"
    assert expected in line, line


def test_every_fault_rejects_unknown_params(tmp_path):
    # Each fault's params model is strict: a typo in a parameter name is an error, not silently ignored.
    for name in FAULTS:
        path = write(tmp_path, positive(faults=[{"name": name, "params": {"definitely_not_a_param": 1}}]), f"{name}.yaml")
        result = validate(path)
        assert result.exit_code == 1
        assert f"{path}: faults[0].params.definitely_not_a_param: unknown field" in result.output


def test_duplicate_ids_across_files(tmp_path):
    a = write(tmp_path, HEALTHY, "a.yaml")
    b = write(tmp_path, HEALTHY, "b.yaml")
    result = validate(a, b)
    assert result.exit_code == 1
    assert f"{b}: id: duplicate id 'tiny-healthy', also in {a}" in result.output


def test_all_problems_of_a_file_are_reported_together(tmp_path):
    data = positive(faults=[{"name": "gremlins"}], labels={"causes": [{"category": "gpu.too_hot"}], "expect": "diagnose"})
    path = write(tmp_path, data)
    result = validate(path)
    assert "faults[0].name" in result.output and "labels.causes[0].category" in result.output


def test_case_schema_is_printed_and_strict():
    result = CliRunner().invoke(main, ["schema", "case"])
    assert result.exit_code == 0
    import json

    schema = json.loads(result.output)
    assert schema["additionalProperties"] is False
    assert {"id", "labels"} <= set(schema["required"]) and {"workload", "recorded"} <= set(schema["properties"])


def test_case_set_hash_changes_with_any_case_file(tmp_path):
    import shutil

    from diageval.paths import default_cases_dir

    shutil.copytree(default_cases_dir(), tmp_path / "cases")
    before = load_case_set(tmp_path / "cases").hash
    victim = sorted((tmp_path / "cases").rglob("*.yaml"))[-1]
    victim.write_text(victim.read_text() + "\n# an edit\n")
    assert load_case_set(tmp_path / "cases").hash != before


def test_healthy_twin_drops_faults_only():
    case = Case.model_validate(positive())
    twin = case.healthy_twin()
    assert twin.faults == [] and twin.workload == case.workload and twin.id == case.id
    assert twin.spec_hash() != case.spec_hash()


def test_the_readme_example_case_is_valid(tmp_path):
    from diageval.paths import SOURCE_ROOT

    readme = (SOURCE_ROOT / "README.md").read_text()
    example = readme.split("```yaml\n", 1)[1].split("```", 1)[0]
    result = validate(write(tmp_path, example))
    assert result.exit_code == 0, result.output


def test_a_declared_difficulty_is_refused_with_the_reason(tmp_path):
    path = write(tmp_path, {**HEALTHY, "difficulty": "easy"})
    result = validate(path)
    assert result.exit_code != 0
    assert str(path) in result.output and "difficulty" in result.output and "measured" in result.output
