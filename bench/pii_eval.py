"""Recall and precision of the PII detector (inferd.guardrails.pii) on the labelled set.

Scores span-exact: a found value counts only when its kind and its exact characters are a
labelled entity's; anything else found is a false positive of its kind, and a labelled entity not
found exactly is missed. Prints one table per split (`tune`, `heldout`, `fresh`, `all`) and exits 1 when a
kind is under --min (98%) on the whole set.

    .venv/bin/python bench/pii_eval.py [--set bench/pii_eval/set.jsonl] [--min 0.98] [--show]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

from inferd.guardrails.pii import KINDS, Detector, detect

SET = Path(__file__).resolve().parent / "pii_eval" / "set.jsonl"


def load(path: Path = SET) -> list[dict]:
    with open(path, encoding="utf-8") as lines:
        return [json.loads(line) for line in lines if line.strip()]


def expected_spans(record: dict) -> set[tuple[str, int, int]]:
    """Each labelled value located in the text: the first occurrence after the previous one."""
    spans: set[tuple[str, int, int]] = set()
    for entity in record["entities"]:
        start = record["text"].find(entity["value"])
        while (entity["kind"], start, start + len(entity["value"])) in spans:
            start = record["text"].find(entity["value"], start + 1)
        spans.add((entity["kind"], start, start + len(entity["value"])))
    return spans


def score(records: list[dict], show: bool = False) -> dict[str, dict[str, float]]:
    """Per kind: true positives, false positives, misses, recall and precision."""
    detector = Detector(KINDS)
    tp, fp, fn = Counter(), Counter(), Counter()
    for record in records:
        want = expected_spans(record)
        got = {(m.kind, m.start, m.end) for m in detect(detector, record["text"])}
        for kind, *_ in got & want:
            tp[kind] += 1
        for kind, start, end in got - want:
            fp[kind] += 1
            if show:
                print(f"  false {kind:12} {record['text'][start:end]!r:40} in {record['text']!r}")
        for kind, start, end in want - got:
            fn[kind] += 1
            if show:
                print(f"  missed {kind:11} {record['text'][start:end]!r:40} in {record['text']!r}")
    table = {}
    for kind in KINDS:
        found, labelled = tp[kind] + fp[kind], tp[kind] + fn[kind]
        table[kind] = {
            "tp": tp[kind], "fp": fp[kind], "fn": fn[kind],
            "recall": tp[kind] / labelled if labelled else 1.0,
            "precision": tp[kind] / found if found else 1.0,
        }  # fmt: skip
    return table


def print_table(name: str, records: list[dict], table: dict[str, dict[str, float]]) -> None:
    print(f"\n{name}: {len(records)} texts, {sum(1 for r in records if not r['entities'])} near-misses")
    print("| kind | labelled | found right | false | missed | recall | precision |")
    print("|---|---|---|---|---|---|---|")
    for kind, row in table.items():
        print(
            f"| {kind} | {row['tp'] + row['fn']} | {row['tp']} | {row['fp']} | {row['fn']} "
            f"| {row['recall']:.1%} | {row['precision']:.1%} |"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", type=Path, default=SET)
    parser.add_argument("--min", type=float, default=0.98, help="least recall and precision per kind")
    parser.add_argument("--show", action="store_true", help="print each false positive and miss")
    args = parser.parse_args()
    records = load(args.set)
    failing = []
    for name in ("tune", "heldout", "fresh", "all"):
        part = [r for r in records if name == "all" or r["split"] == name]
        table = score(part, show=args.show and name != "all")
        print_table(name, part, table)
        if name == "all":
            failing = [k for k, row in table.items() if min(row["recall"], row["precision"]) < args.min]
    if failing:
        print(f"\nunder {args.min:.0%}: {', '.join(failing)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
