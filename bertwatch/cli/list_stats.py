"""``bertwatch stats``: every statistic bertwatch measures, by family, with what it means in one line.

The names, families and definitions come from ``bertwatch.core.stat_names`` (torch-free, so this is instant).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

__all__ = ["cli_stats", "stats_listing"]


def stats_listing() -> str:
    """The listing ``bertwatch stats`` prints: each family's title, then one line per statistic (name and
    definition); a family that ``stats=`` cannot select says which option measures it.

    Example:
        >>> print(stats_listing().splitlines()[0])
        Special tokens
    """
    from bertwatch.core.stat_names import ALL_STATS, DEFINITIONS, STAT_GROUPS

    width = max(len(name) for _, names in STAT_GROUPS for name in names)
    blocks = []
    for title, names in STAT_GROUPS:
        heading = title if set(names) <= set(ALL_STATS) else f"{title} (measured with --word-classes, not --stats)"
        lines = [f"  {name:<{width}}  {DEFINITIONS[name]}" for name in names]
        blocks.append("\n".join([heading, *lines]))
    return "\n\n".join(blocks)


def cli_stats(argv: Sequence[str]) -> int:
    argparse.ArgumentParser(
        prog="bertwatch stats",
        description="List every statistic bertwatch measures, by family, with a one-line definition. Give the "
        "names to --stats (bertwatch run) or stats=[...] (Python); docs/statistics.md has the exact definitions.",
    ).parse_args(list(argv))
    print(stats_listing())
    return 0
