"""Issue 44, item 6: a YAML alias bomb ("billion laughs") in a case file is refused before anything is built.

Nine anchors, each a list of nine aliases of the one before, are ~400 bytes and compose to a graph of ~90
nodes, but anything that walks the value (the case model, an error message quoting it) meets 9^9 strings:
`diageval cases validate` held 1.3 GB past 45 s on such a file. The strict reader refuses the first anchor
on the parser's events, naming the file and the line, and never calls the composer."""

from __future__ import annotations

import re
import shutil
import tracemalloc
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from diageval.cases import strict_yaml
from diageval.cases.load import parse_case_file
from diageval.cases.strict_yaml import YamlProblem, parse_yaml
from diageval.cli import main
from diageval.paths import default_taxonomy_path
from locations import REPO

CASE_HEAD = """id: bomb
title: a case with a bomb in it
workload: {name: mlp_ddp, world_size: 2, steps: 20}
labels: {expect: healthy}
"""


def bomb(levels: int = 9) -> tuple[str, str]:
    """Anchors a..: the first a list of nine strings, each next one nine aliases of the one before."""
    names = [chr(ord("a") + i) for i in range(levels)]
    lines = [f'l0: &{names[0]} ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i in range(1, levels):
        lines.append(f"l{i}: &{names[i]} [{','.join(['*' + names[i - 1]] * 9)}]")
    return "\n".join(lines), names[-1]


def case_with_bomb_in(field: str, levels: int = 9) -> str:
    """A case whose ``field`` (a dotted path) is the bomb's last anchor; the anchors sit under ``x-anchors``."""
    anchors, last = bomb(levels)
    body = "x-anchors:\n" + "\n".join("  " + line for line in anchors.splitlines()) + "\n"
    head = CASE_HEAD
    if field == "title":
        head = head.replace("title: a case with a bomb in it", f"title: *{last}")
    elif field == "workload.params":
        head = head.replace("steps: 20}", f"steps: 20, params: {{seed: *{last}}}}}")
    elif field == "labels.symptoms":
        head = head.replace("{expect: healthy}", f"{{expect: healthy, symptoms: *{last}}}")
    elif field == "tags":
        head += f"tags: *{last}\n"
    else:
        raise AssertionError(field)
    return body + head  # anchors first: YAML wants an anchor before its aliases


@pytest.mark.parametrize("field", ["title", "workload.params", "labels.symptoms", "tags"])
def test_an_alias_bomb_in_any_field_is_refused_before_it_is_composed(field, monkeypatch, tmp_path):
    text = case_with_bomb_in(field)
    assert len(text.encode()) < 1024
    composed = []
    real_load = yaml.load
    monkeypatch.setattr(strict_yaml.yaml, "load", lambda *a, **k: composed.append(1) or real_load(*a, **k))
    tracemalloc.start()
    try:
        with pytest.raises(YamlProblem) as info:
            parse_yaml(text.encode(), "cases/bomb.yaml")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert composed == []  # the composer never ran: no node, let alone the 9^9 values, was built
    assert peak < 1 << 20  # the parser's events for a 1 kB file, nothing more
    message = str(info.value)
    assert message.startswith("cases/bomb.yaml: line 2, column ")  # the first anchor, `&a` of l0
    assert "&a" in message and "anchors and aliases" in message and "write the value out" in message


def test_an_alias_without_an_anchor_before_it_is_named_too():
    with pytest.raises(YamlProblem, match=r"^f\.yaml: .*line 1"):
        parse_yaml(b"title: *nothing\n", "f.yaml")


def test_an_anchor_alone_is_refused_and_plain_data_still_reads():
    with pytest.raises(YamlProblem, match=r"line 2, column 8: &x: YAML anchors"):
        parse_yaml(b"id: a\ntitle: &x hello\n", "f.yaml")
    assert parse_yaml(b"id: a\ntitle: 'a & b * c'\ntags: [x, '*y', '&z']\n", "f.yaml") == {
        "id": "a", "title": "a & b * c", "tags": ["x", "*y", "&z"]}


def test_cases_validate_refuses_the_bomb_with_the_file_and_line_and_stays_small(tmp_path):
    """Through the CLI, as a contributor's CI would run it. Six levels (9^6 = 531,441 strings when walked)
    keep the old reader from hanging this test: it built them, and quoted them in its error message."""
    folder = tmp_path / "cases"
    folder.mkdir()
    shutil.copy(default_taxonomy_path(), folder / "taxonomy.yaml")
    (folder / "bomb.yaml").write_text(case_with_bomb_in("title", levels=6), encoding="utf-8")
    tracemalloc.start()
    try:
        result = CliRunner().invoke(main, ["cases", "validate", str(folder / "bomb.yaml")])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    assert re.search(rf"{re.escape(str(folder / 'bomb.yaml'))}: .*line 2, column \d+: &a: YAML anchors", result.output)
    assert peak < 8 << 20, peak
    case, problems = parse_case_file(folder / "bomb.yaml")
    assert case is None and len(problems) == 1 and "anchors and aliases" in problems[0].message


def test_the_corpus_uses_no_anchors():
    """Refusing anchors outright costs the corpus nothing: every case file still reads."""
    for path in sorted((REPO / "cases").rglob("*.yaml")):
        parse_yaml(path.read_bytes(), str(path))


_YAML_READ = re.compile(r"\byaml\.(?:safe_load|load|full_load|unsafe_load|load_all|safe_load_all|compose|"
                        r"compose_all|parse|scan)\b|\bYAML\(|ruamel")


def test_every_yaml_reader_of_the_project_is_the_strict_one():
    """Case files and the taxonomy are the project's untrusted YAML; nothing but strict_yaml.py may parse YAML
    (tests read the project's own files and are not scanned)."""
    strict = REPO / "harness" / "cases" / "strict_yaml.py"
    offenders = []
    for folder in ("harness", "diagnosers", "scoring", "reports", "scripts", "benchmarks"):
        for path in sorted((REPO / folder).rglob("*.py")):
            if path == strict:
                continue
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                code = line.split("#", 1)[0]
                if _YAML_READ.search(code) and "``" not in code:  # a docstring naming yaml.safe_load is not a call
                    offenders.append(f"{path.relative_to(REPO)}:{number}: {line.strip()}")
    assert offenders == []
    assert _YAML_READ.search("data = yaml.safe_load(text)")  # the pattern finds a call
