"""The ``agent`` diagnoser over the corpus, end to end, with a scripted investigating model (issue 41's "done when").

Serves ``tests/scripted_models.investigate`` (a test double of a chat model: it asks the real tools over MCP
in the box and answers by one stated rule; see its docstring) on the loopback OpenAI-compatible server the tests use
(``tests/fake_openai_server.py``), then runs ``diageval run --diagnoser agent --allow-network`` as a user would, over
the corpus (or ``--tag``/``--case`` subsets), priced, with ``--repeats``, reading cached bundles. Then renders the
board (``diageval report``: markdown and HTML) and prints its figures: cases, skill with its interval, recall and
grounded recall, $/case, tokens, turns and tool calls per case, the statuses, the repeats' stable / flaky /
catastrophic counts, the trajectories on the HTML page, the wall time and the machine's load.

It also reads every tool answer the model was sent for a route to the labels: a case id of the corpus, a taxonomy
id or an injected fault's name in what a tool returned. A hit is a defect of the tools (labels never reach a
diagnoser) and is printed as such; the exit status is 1 then.

The endpoint sends no usage, so the agent estimates tokens at 4 characters a token (the trajectories say
``estimated``), priced at ``--prices`` (default: USD 3 / 15 / 0.3 per million prompt / completion / cached tokens,
an illustrative table, the one docs/diagnosers.md shows): dollars are what a model with that price would be billed
for this conversation, not a measurement of any model.

``--model hunter`` serves the red team's label hunter instead (``scripted_models.label_hunter``: it asks every
file, the traced ranks' op names, the case files and the bundle cache by path, and claims any cause id a tool
answers): it must claim nothing and score like ``null`` (its skill is printed beside null's); any claim exits 1.

Usage: python benchmarks/agent_corpus.py [--model investigator|hunter] [--repeats 2] [--jobs 1] [--tag TAG]...
[--case ID]... [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from fake_openai_server import FakeChatServer, Usage  # noqa: E402
from scripted_models import investigate, label_hunter  # noqa: E402

from diageval.run.store import RunStore  # noqa: E402

MODEL = "scripted-investigator"
PRICES = {"prompt": 3.0, "completion": 15.0, "cached": 0.3}
RUN_ID = "agent-scripted"


def label_words() -> dict[str, str]:
    """Word (lower case) -> what it names: the corpus' case ids, taxonomy ids and fault names."""
    from diageval.cases.load import load_case_set
    from diageval.paths import default_cases_dir
    from diageval.recording.faults import FAULTS

    case_set = load_case_set(default_cases_dir())
    words = {lc.case.id.lower(): "case id" for lc in case_set.cases}
    words.update({e.id.lower(): "taxonomy id" for e in case_set.taxonomy.entries})
    words.update({name.lower(): "fault name" for name in FAULTS})
    return words


def routes(requests: list[dict], words: dict[str, str]) -> list[str]:
    """Each tool answer the model was sent (whole, as the endpoint received it; a trajectory keeps a shortened copy)
    that holds a label word, as a line: the tool, its arguments and the word. What the call itself said (its argument
    values: a refusal quotes the path it refuses) is taken out of the answer first: an echo of the model's own words
    hands it nothing."""
    pattern = re.compile(r"(?<![a-z0-9_.-])(" + "|".join(re.escape(w) for w in sorted(words, key=len, reverse=True))
                         + r")(?![a-z0-9_-])")
    asked: dict[str, tuple[str, list[str]]] = {}
    seen: set[tuple[str, str]] = set()
    found = []
    for request in requests:
        for m in request["body"]["messages"]:
            for c in m.get("tool_calls") or []:
                try:
                    said = [str(v) for v in json.loads(c["function"]["arguments"] or "{}").values()]
                except (ValueError, AttributeError):
                    said = [c["function"]["arguments"]]
                asked[c["id"]] = (f"{c['function']['name']}({c['function']['arguments']})", said)
            if m.get("role") != "tool" or (m["tool_call_id"], m["content"]) in seen:
                continue
            seen.add((m["tool_call_id"], m["content"]))
            call, said = asked.get(m["tool_call_id"], ("?", []))
            text = m["content"]
            for value in sorted(said, key=len, reverse=True):
                text = text.replace(value, "") if value else text
            for hit in {h.group(1) for h in pattern.finditer(text.lower())}:
                found.append(f"{call[:200]} answered {words[hit]} {hit!r}")
    return found


def hunter():
    """The label hunter aimed at this machine's label stores: a case file and a file of the bundle cache."""
    from diageval.cases.taxonomy import load_taxonomy
    from diageval.paths import bundle_cache_dir, default_cases_dir, default_taxonomy_path

    case_file = next(iter(sorted(default_cases_dir().rglob("*.yaml"))))
    cached = next(iter(sorted(bundle_cache_dir().glob("*.json"))), bundle_cache_dir())
    causes = [e.id for e in load_taxonomy(default_taxonomy_path()).entries if e.kind == "cause"]
    return label_hunter([str(case_file), str(cached)], causes)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", choices=("investigator", "hunter"), default="investigator")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--tag", action="append", default=[])
    ap.add_argument("--case", action="append", default=[])
    ap.add_argument("--out", type=Path, default=None, help="folder for the run (default: a temporary one)")
    ap.add_argument("--prices", default=json.dumps(PRICES), help="USD per million tokens, JSON")
    args = ap.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="agent-corpus-"))
    selection = [a for t in args.tag for a in ("--tag", t)] + [a for c in args.case for a in ("--case", c)]
    load_before = os.getloadavg()
    model = investigate if args.model == "investigator" else hunter()
    with FakeChatServer(model=model, usage=Usage(sent=False)) as server:
        env = {**os.environ, "AGENT_DIAGNOSER_BASE_URL": server.base_url, "AGENT_DIAGNOSER_MODEL": MODEL,
               "AGENT_DIAGNOSER_PRICES": json.dumps({MODEL: json.loads(args.prices)}),
               "AGENT_DIAGNOSER_MAX_RETRIES": "0"}
        start = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "diageval", "run", "--diagnoser", "agent", "--allow-network",
                               "--repeats", str(args.repeats), "--jobs", str(args.jobs), "--out", str(out),
                               "--run-id", RUN_ID, *selection], env=env, capture_output=True, text=True)
        wall = time.perf_counter() - start
        requests = list(server.requests)
    load_after = os.getloadavg()
    if done.returncode != 0:
        print(done.stdout[-4000:], done.stderr[-4000:], sep="\n")
        print(f"diageval run exited {done.returncode}")
        return 1
    run_dir = out / RUN_ID
    board, page = out / "leaderboard.md", out / "leaderboard.html"
    subprocess.run([sys.executable, "-m", "diageval", "report", str(run_dir), "-o", str(board), "--html", str(page)],
                   check=True, capture_output=True)
    summary = RunStore(run_dir).read_summary()
    m, rep = summary.metrics, summary.repeats
    html = page.read_text(encoding="utf-8")

    def fig(v, fmt=".3g") -> str:
        if v is None or v.value is None:
            return f"- n={getattr(v, 'n', 0)}"
        lo, hi = v.ci or (None, None)
        band = f" [{lo:{fmt}}, {hi:{fmt}}]" if lo is not None and hi is not None else ""
        return f"{v.value:{fmt}}{band} n={v.n}"

    print(f"run: {run_dir}  board: {board}  page: {page}")
    print(f"wall: {wall:.0f} s for {summary.counts.scored} scored cases x {args.repeats} repeats, --jobs {args.jobs}"
          f" ({wall / max(1, summary.counts.scored * args.repeats):.2f} s a diagnosis);"
          f" model requests: {len(requests)}")
    print(f"load average (1, 5, 15 min): before {load_before[0]:.2f} {load_before[1]:.2f} {load_before[2]:.2f},"
          f" after {load_after[0]:.2f} {load_after[1]:.2f} {load_after[2]:.2f}; cores: {os.cpu_count()}")
    print(f"statuses: {dict(sorted(summary.counts.statuses.items()))}")
    print(f"skill: {fig(m.skill, '.2f')} (null's on these cases: {summary.reference.null_skill:.2f})")
    print(f"recall: {fig(m.recall, '.2f')}   grounded recall: {fig(m.grounded_recall, '.2f')}"
          f"   precision: {fig(m.precision, '.2f')}   false alarms: {fig(m.false_alarm_rate, '.2f')}")
    print(f"$/case: {fig(m.dollars_per_case, '.3g')}   prompt tok/case: {fig(m.prompt_tokens_per_case, '.4g')}"
          f"   completion tok/case: {fig(m.completion_tokens_per_case, '.3g')}")
    print(f"turns/case: {fig(m.turns_per_case, '.2f')}   tool calls/case: {fig(m.tool_calls_per_case, '.3g')}"
          f"   s/case: {fig(m.seconds_per_case, '.3g')}")
    if rep is not None:
        print(f"repeats: {rep.repeats} over {rep.cases} cases: stable {rep.stable}, flaky {rep.flaky},"
              f" catastrophic {rep.catastrophic}; skill over repeats {fig(rep.skill, '.2f')};"
              f" consistency {fig(rep.consistency, '.2f')}")
    text = board.read_text(encoding="utf-8")
    trajectories, figure = html.count('class="trajectory"'), 'id="cost-figure"' in html
    print(f"board: Cost table {'### Cost' in text}, grounded column {'grounded R' in text};"
          f" page: {trajectories} trajectories, cost figure {figure}")
    found = routes(requests, label_words())
    print(f"routes to labels in tool answers: {len(found)}")
    for line in found[:50]:
        print("  ROUTE", line)
    claims = sum(len(r.verdicts) for r in RunStore(run_dir).read_results())
    if args.model == "hunter":
        print(f"hunter: {claims} claims; skill {fig(m.skill, '.3f')} against null's {summary.reference.null_skill:.3f}")
    return 1 if found or (args.model == "hunter" and claims) else 0


if __name__ == "__main__":
    sys.exit(main())
