"""Plain reference implementations of the task metrics (loops, no bertwatch code), shared by the task tests."""

from __future__ import annotations

import re
import string
from collections import Counter


def normalize(text: str) -> str:
    text = "".join(c for c in text.lower() if c not in string.punctuation)
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


def squad_f1(prediction: str, gold: str) -> float:
    p, g = normalize(prediction).split(), normalize(gold).split()
    if not p or not g:
        return float(p == g)
    same = sum((Counter(p) & Counter(g)).values())
    if not same:
        return 0.0
    precision, recall = same / len(p), same / len(g)
    return 2 * precision * recall / (precision + recall)


def plain_span(start, end, allowed, longest: int) -> tuple[int, int]:
    best, span = None, (-1, -1)
    for s in range(len(start)):
        for e in range(s, min(len(start), s + longest)):
            if allowed[s] and allowed[e] and (best is None or start[s] + end[e] > best):
                best, span = start[s] + end[e], (s, e)
    return span
