"""Summarise a py-spy `--format raw` profile (collapsed stacks): where the samples go.

    .venv/bin/python -m bench.e2e.pyspy_top bench/results/e2e-py-spy-<...>.txt [--top 30]

Prints the share of samples that are idle (the event loop waiting in epoll),
then the functions with the most samples on top of the stack (self), and the
functions with the most samples anywhere on the stack (inclusive), by
`function (file)` without line numbers.
"""

from __future__ import annotations

import argparse
import re
from collections import Counter
from pathlib import Path

_LINE = re.compile(r":\d+\)$")


def frame_name(frame: str) -> str:
    # "reconcile (controller/buildrun/reconciler.py:141)" -> without the line number,
    # and the path from site-packages or the repo on.
    frame = _LINE.sub(")", frame.strip())
    for marker in ("site-packages/", "/work/main/", "python3.11/"):
        if marker in frame:
            head, _, tail = frame.partition("(")
            frame = f"{head}({tail.split(marker, 1)[1]}"
    return frame


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("path", type=Path)
    p.add_argument("--top", type=int, default=30)
    args = p.parse_args()
    self_time: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    total = idle = 0
    for line in args.path.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack:
            continue
        count = int(count_text)
        frames = [frame_name(f) for f in stack.split(";")]
        total += count
        if frames[-1].startswith("EpollSelector.select ("):
            idle += count
            continue
        self_time[frames[-1]] += count
        for f in set(frames):
            inclusive[f] += count
    busy = total - idle
    print(f"samples {total}, idle in select {idle} ({100 * idle / total:.1f}%), busy {busy}")
    print(f"\ntop {args.top} self (share of busy samples)")
    for name, n in self_time.most_common(args.top):
        print(f"{100 * n / busy:6.1f}%  {name}")
    print(f"\ntop {args.top} inclusive (share of busy samples)")
    for name, n in inclusive.most_common(args.top):
        print(f"{100 * n / busy:6.1f}%  {name}")


if __name__ == "__main__":
    main()
