"""Retrieval eval: does a conversation answer questions about the documents uploaded into it?

    .venv/bin/python bench/rag_eval.py                       # all 40 questions (10 to 20 min on 2 cores)
    .venv/bin/python bench/rag_eval.py --set heldout         # the 40 held-out questions (heldout/)
    .venv/bin/python bench/rag_eval.py --set heldout --list  # what would be asked, without a server
    .venv/bin/python bench/rag_eval.py --only recipes --limit 2
    .venv/bin/python bench/rag_eval.py --ids recipes-number,recipes-table   # chosen questions
    .venv/bin/python bench/rag_eval.py --big                 # one 1,000,000-character source, 3 questions
    .venv/bin/python bench/rag_eval.py --src /tmp/base/src   # measure another checkout's code ("before")

It starts `inferd serve` with the built-in catalogue (chat model `fast`, Qwen2.5-Coder-0.5B;
embedder all-MiniLM-L6-v2) on a fresh data dir and creates one end user. The set lives in
bench/rag_eval/: 8 invented documents (docx, pdf, html, md, txt; sources in docs/, built by
build.py into files/) and questions.json, five questions per document, one of each kind:
lookup, buried (a fact mid-document), number (with its unit, wrong numbers nearby), chained (two
facts in two places) and table (a cell, asked by row and column).

Two sets: the first (the default, bench/rag_eval/) has been tuned on; the held-out set
(`--set heldout`, bench/rag_eval/heldout/: 8 documents of other kinds, also docx, pdf, md, html,
txt and odt, pptx, xlsx, 40 questions of the same five kinds) was written before any change to
retrieval was tried and is never tuned on: nothing in the pipeline is changed to make one of its
questions pass. Both sets are run and reported every time a change to retrieval is measured, the
held-out numbers beside the first set's. A document the server refuses to upload (the held-out
.xlsx, while the extractor reads no spreadsheet) counts as neither retrieved nor answered: its
questions are not asked, and their rows say why.

Each question gets its own conversation (created with a title, so no title call runs after the
answer): the document is uploaded into it (the same bytes again are a deduplicated link), the
question saved as a user message, and the reply streamed from POST .../generate. Per question:
- correct: the streamed answer text contains an accepted answer (grading.py: normalised, at word
  boundaries, so "4,500 EUR" matches "4500 EUR" and "45" never matches "450");
- retrieved: an accepted answer is in the `tool` rows of the answer's turn (GET the conversation);
- time to first token: from sending the generate request to the first answer-text frame
  (`{"chunk": ...}` without a "type"), and the total time to `[DONE]`.
Markdown goes to stdout (a table per kind, then per question), progress to stderr, every result
as JSON to --out.

--big puts one document (lab_safety) in the middle of 1,000,000 characters of seeded filler prose
(bench/ingest.py's generator), uploads it once (timed), then asks three questions about it, each
in a new conversation linking the same source. Target: first answer token in under 3 s.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx

HERE = Path(__file__).resolve().parent
SET = HERE / "rag_eval"
SETS = {"first": SET, "heldout": SET / "heldout"}  # each holds files/ and questions.json
sys.path[:0] = [str(SET), str(HERE)]

from grading import mentions_any  # noqa: E402
from serving import Served, eval_server  # noqa: E402

KINDS = ("lookup", "buried", "number", "chained", "table")
BIG_DOCUMENT, BIG_QUESTIONS = "lab_safety", ("lab_safety-lookup", "lab_safety-number", "lab_safety-table")
BIG_CHARS, TTFT_TARGET_S = 1_000_000, 3.0
# A turn is abandoned after TURN_LIMIT_S (closing the stream cancels it server-side): the 0.5B model
# can loop for many minutes, and httpx's timeout only bounds the wait between two frames.
TURN_LIMIT_S, UPLOAD_TIMEOUT_S = 900.0, 1800.0


@dataclass
class Turn:
    """What one generate call streamed."""

    text: str = ""
    ttft_s: float | None = None
    total_s: float = 0.0
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None


@dataclass
class Result:
    """One question's outcome (a row of the --out JSON)."""

    id: str
    document: str
    kind: str
    question: str
    answers: list[str]
    conversation_id: int
    reply: str
    correct: bool
    retrieved: bool
    ttft_s: float | None
    total_s: float
    tool_calls: list[dict[str, Any]]
    retrieved_text: str
    error: str | None
    upload_s: float | None = None  # this conversation's upload (a deduplicated link after the first)
    check: dict[str, Any] | None = None  # the answer row's metadata.answer_check: the answer was asked again


class UploadRefused(Exception):
    """The server answered an upload with an error (a format it does not read, for one)."""


class Client:
    """The end user's side of the conversation API."""

    def __init__(self, served: Served) -> None:
        self.base = served.base
        self.http = httpx.Client(headers={"Authorization": f"Bearer {served.user_key}"}, timeout=60)

    def create(self, title: str) -> int:
        response = self.http.post(f"{self.base}/conversations", json={"title": title})
        response.raise_for_status()
        return int(response.json()["conversation"]["id"])

    def upload(self, cid: int, name: str, data: bytes) -> tuple[float, dict[str, Any]]:
        """(seconds, body) of an upload into the conversation; 201 new or 200 duplicate."""
        started = time.perf_counter()
        response = self.http.post(f"{self.base}/conversations/{cid}/files/vectorize", files={"file": (name, data)},
                                  timeout=UPLOAD_TIMEOUT_S)
        seconds = time.perf_counter() - started
        if response.status_code not in (200, 201):
            raise UploadRefused(f"upload of {name} answered {response.status_code}: {response.text[:300]}")
        return seconds, dict(response.json())

    def say(self, cid: int, text: str) -> int:
        response = self.http.post(f"{self.base}/conversations/{cid}/messages", json={"message": text})
        response.raise_for_status()
        return int(response.json()["message"]["id"])

    def generate(self, cid: int, message_id: int, model: str) -> Turn:
        """Stream one turn, timing the first answer-text frame and the end."""
        turn, started = Turn(), time.perf_counter()
        parts: list[str] = []
        with self.http.stream("POST", f"{self.base}/conversations/{cid}/generate", params={"model": model},
                              json={"conversation_id": cid, "message_id": message_id},
                              timeout=TURN_LIMIT_S) as response:
            if response.status_code != 200:
                turn.error = f"HTTP {response.status_code}: {response.read().decode()[:300]}"
                return turn
            for frame in sse_frames(response.iter_lines()):
                if frame == "[DONE]":
                    break
                if "chunk" in frame and "type" not in frame:
                    turn.ttft_s = turn.ttft_s if turn.ttft_s is not None else time.perf_counter() - started
                    parts.append(str(frame["chunk"]))
                elif frame.get("type") == "tool_call":
                    turn.tool_calls.append(frame)
                elif "error" in frame:
                    turn.error = json.dumps(frame["error"])
                if time.perf_counter() - started > TURN_LIMIT_S:
                    turn.error = f"abandoned after {TURN_LIMIT_S:.0f} s"
                    break
        turn.total_s = time.perf_counter() - started
        turn.text = "".join(parts)
        return turn

    def retrieved(self, cid: int) -> tuple[str, dict[str, Any] | None]:
        """The text of the tool rows of the conversation's final assistant turn ('' when none), and
        what the answer check did (the final row's metadata.answer_check). A turn that ended without
        an assistant row (an error) is judged on all the tool rows: each conversation here holds one turn."""
        response = self.http.get(f"{self.base}/conversations/{cid}", params={"limit": 500})
        response.raise_for_status()
        messages = response.json()["conversation"]["messages"]
        finals = [m for m in messages if m["role"] == "assistant" and m.get("finish_reason") in ("stop", "length")]
        turn_id = finals[-1]["turn_id"] if finals else None
        check = (finals[-1].get("metadata") or {}).get("answer_check") if finals else None
        return "\n\n".join(m["message"] for m in messages
                             if m["role"] == "tool" and (turn_id is None or m["turn_id"] == turn_id)), check


def sse_frames(lines: Any) -> Any:
    """The decoded `data:` payloads of an SSE stream: JSON objects, or the string "[DONE]"."""
    data: list[str] = []
    for line in lines:
        if line.startswith("data:"):
            data.append(line[5:].removeprefix(" "))
        elif not line and data:
            payload = "\n".join(data)
            data = []
            yield payload if payload == "[DONE]" else json.loads(payload)
    if data:
        payload = "\n".join(data)
        yield payload if payload == "[DONE]" else json.loads(payload)


def ask(client: Client, question: dict[str, Any], file_name: str, data: bytes, model: str) -> Result:
    """One question in a new conversation that links `file_name`; when the upload is refused, the
    question is not asked and counts as neither answered nor retrieved."""
    cid = client.create(f"rag-eval {question['id']}")
    try:
        upload_s, _ = client.upload(cid, file_name, data)
    except UploadRefused as refused:
        return Result(question["id"], question["document"], question["kind"], question["question"],
                      question["answers"], cid, "", False, False, None, 0.0, [], "", str(refused))
    turn = client.generate(cid, client.say(cid, question["question"]), model)
    retrieved_text, check = client.retrieved(cid)
    return Result(question["id"], question["document"], question["kind"], question["question"], question["answers"],
                  cid, turn.text, mentions_any(turn.text, question["answers"]),
                  mentions_any(retrieved_text, question["answers"]), turn.ttft_s, turn.total_s, turn.tool_calls,
                  retrieved_text, turn.error, upload_s, check)


def warm_up(client: Client, model: str) -> None:
    """Load the chat model before anything is timed (a turn with no sources)."""
    cid = client.create("rag-eval warm-up")
    client.generate(cid, client.say(cid, "Reply with the single word OK."), model)


def progress(result: Result) -> None:
    """One line per question on stderr, so a long run can be followed."""
    error = f" error={result.error}" if result.error else ""
    print(f"{result.id}: correct={result.correct} retrieved={result.retrieved} ttft={seconds(result.ttft_s)} "
          f"total={result.total_s:.1f}s reply={result.reply[:100]!r}{error}", file=sys.stderr, flush=True)


def seconds(value: float | None) -> str:
    return "none" if value is None else f"{value:.1f} s"


def summary_table(results: list[Result]) -> str:
    """Markdown: per kind and overall, correct and retrieved counts, median and max TTFT."""
    lines = ["| kind | questions | answered correctly | answer in retrieval | median TTFT | max TTFT |",
             "|---|---|---|---|---|---|"]
    for kind in (*KINDS, "all"):
        rows = [r for r in results if kind in ("all", r.kind)]
        if not rows:
            continue
        ttfts = [r.ttft_s for r in rows if r.ttft_s is not None]
        median = seconds(statistics.median(ttfts)) if ttfts else "none"
        worst = seconds(max(ttfts)) if ttfts else "none"
        label = f"**{kind}**" if kind == "all" else kind
        lines.append(f"| {label} | {len(rows)} | {sum(r.correct for r in rows)} | {sum(r.retrieved for r in rows)} "
                     f"| {median} | {worst} |")
    return "\n".join(lines)


def question_table(results: list[Result]) -> str:
    """Markdown: one row per question with the start of the reply."""
    lines = ["| question | correct | retrieved | TTFT | total | searches | reply chars | reply (start) |",
             "|---|---|---|---|---|---|---|---|"]
    for r in results:
        reply = " ".join(r.reply.split())[:90].replace("|", "\\|") or (f"(error: {r.error[:60]})" if r.error else "")
        lines.append(f"| {r.id} | {'yes' if r.correct else 'no'} | {'yes' if r.retrieved else 'no'} | "
                     f"{seconds(r.ttft_s)} | {r.total_s:.1f} s | {len(r.tool_calls)} | {len(r.reply):,} | {reply} |")
    return "\n".join(lines)


def code_label(src: Path, served: Served) -> str:
    """Which code was measured: the package the server imported and its checkout's commit."""
    describe = subprocess.run(["git", "-C", str(src), "describe", "--always", "--dirty"], capture_output=True,
                              text=True)
    return f"server code `{served.imported_from}` (commit {describe.stdout.strip() or 'unknown'})"


def run_set(client: Client, questions: list[dict[str, Any]], model: str, files: Path) -> list[Result]:
    results = []
    for question in questions:
        path = files / question["document"]
        results.append(ask(client, question, path.name, path.read_bytes(), model))
        progress(results[-1])
    return results


def big_source() -> str:
    """BIG_CHARS characters: filler prose, the big document's source text, more filler."""
    from ingest import document as filler  # bench/ingest.py: seeded prose from a fixed vocabulary

    embedded = (SET / "docs" / f"{BIG_DOCUMENT}.md").read_text().strip()
    head = filler((BIG_CHARS - len(embedded)) // 2, seed=7)
    tail = filler(BIG_CHARS - len(head) - len(embedded) - 4, seed=8)
    return f"{head}\n\n{embedded}\n\n{tail}"


def run_big(client: Client, questions: list[dict[str, Any]], model: str) -> dict[str, Any]:
    """Upload the big source once (timed), then each question in a conversation linking it."""
    data = big_source().encode()
    first = client.create("rag-eval big upload")
    upload_s, body = client.upload(first, "big_source.txt", data)
    print(f"big upload: {len(data):,} bytes in {upload_s:.1f} s", file=sys.stderr, flush=True)
    chosen = [q for q in questions if q["id"] in BIG_QUESTIONS]
    results = []
    for question in chosen:
        results.append(ask(client, question, "big_source.txt", data, model))
        progress(results[-1])
    return {"characters": len(data.decode()), "upload_s": upload_s, "metadata": body.get("source", {}).get("metadata"),
            "results": results}


def big_report(big: dict[str, Any], results: list[Result]) -> str:
    """Markdown: the upload, then one row per question."""
    metadata = big["metadata"] or {}
    lines = [f"Upload: {big['characters']:,} characters, {metadata.get('chunks', '?')} chunks, "
             f"{big['upload_s']:.1f} s.", "",
             "| question | upload again | searches | correct | retrieved | TTFT | under 3 s | total | reply (start) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        met = r.ttft_s is not None and r.ttft_s < TTFT_TARGET_S
        reply = " ".join(r.reply.split())[:70].replace("|", "\\|") or (f"(error: {r.error[:60]})" if r.error else "")
        lines.append(f"| {r.id} | {seconds(r.upload_s)} | {len(r.tool_calls)} | {'yes' if r.correct else 'no'} | "
                     f"{'yes' if r.retrieved else 'no'} | {seconds(r.ttft_s)} | {'yes' if met else 'no'} | "
                     f"{r.total_s:.1f} s | {reply} |")
    return "\n".join(lines)


def render(saved: dict[str, Any]) -> str:
    """The Markdown report of a saved run (what --out wrote)."""
    results = [Result(**row) for row in saved["results"]]  # runs before `check` was kept lack it
    if saved.get("big"):
        report = big_report(saved, results)
    else:
        report = f"{summary_table(results)}\n\n{question_table(results)}"
    question_set = saved.get("set", "first")
    return f"Run {saved['started']}, {question_set} set, model `{saved['model']}`, {saved['code']}.\n\n{report}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--set", choices=sorted(SETS), default="first",
                        help="which question set: first (default, tuned on) or heldout (never tuned on)")
    parser.add_argument("--list", action="store_true", help="list the chosen questions and exit (no server)")
    parser.add_argument("--only", help="one document (file name, with or without its extension)")
    parser.add_argument("--limit", type=int, help="at most N questions")
    parser.add_argument("--ids", help="only these questions, comma-separated ids (travel_policy-chained,...)")
    parser.add_argument("--kinds", help="only these kinds of question, comma-separated (lookup,buried,number,chained,table)")
    parser.add_argument("--model", default="fast")
    parser.add_argument("--big", action="store_true", help="the 1,000,000-character source instead of the set")
    parser.add_argument("--src", type=Path, default=HERE.parent / "src", help="the source tree the server imports")
    parser.add_argument("--out", type=Path, help="where the JSON goes (default /tmp/rag_eval.json, "
                        "/tmp/rag_eval_heldout.json for the held-out set)")
    parser.add_argument("--report", type=Path, metavar="JSON", help="print the report of a saved run and exit")
    args = parser.parse_args()
    if args.report:
        print(render(json.loads(args.report.read_text())))
        return
    if args.big and args.set != "first":
        raise SystemExit("--big uses the first set's lab_safety document")
    folder = SETS[args.set]
    out = args.out or Path("/tmp/rag_eval.json" if args.set == "first" else f"/tmp/rag_eval_{args.set}.json")
    every = json.loads((folder / "questions.json").read_text())
    questions = [q for q in every if not args.only or args.only in (q["document"], q["document"].rsplit(".", 1)[0])]
    if not questions:
        raise SystemExit(f"no document {args.only!r}")
    questions = [q for q in questions if not args.kinds or q["kind"] in args.kinds.split(",")]
    questions = [q for q in questions if not args.ids or q["id"] in args.ids.split(",")]
    questions = questions[:args.limit] if args.limit else questions
    if args.list:
        for q in questions:
            print(f"{q['id']}\t{q['kind']}\t{q['document']}\t{q['question']}")
        print(f"{len(questions)} questions of the {args.set} set", file=sys.stderr)
        return
    saved: dict[str, Any] = {"started": time.strftime("%Y-%m-%d %H:%M"), "set": args.set, "model": args.model,
                             "big": args.big}
    with eval_server(args.src.resolve()) as served:
        print(f"server imports {served.imported_from}", file=sys.stderr, flush=True)
        client = Client(served)
        warm_up(client, args.model)
        saved["code"] = code_label(args.src.resolve(), served)
        if args.big:
            big = run_big(client, every, args.model)
            saved.update(big, results=[asdict(r) for r in big["results"]])
        else:
            saved["results"] = [asdict(r) for r in run_set(client, questions, args.model, folder / "files")]
    out.write_text(json.dumps(saved, indent=2))
    print(render(saved))
    print(f"\nfull results: {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
