"""``bertwatch stats``: every statistic bertwatch measures, by family, with what it means in one line.

The names, families and definitions come from ``bertwatch.core.stat_names`` (torch-free, so this is instant).
"""

from __future__ import annotations

from collections.abc import Sequence

from bertwatch.cli.argv import command_parser

__all__ = ["LEGEND", "cli_stats", "stats_listing"]


#: The listing's first line: what the mark before a statistic means.
LEGEND = "* measured by default; --stats A,B (Python: stats=[...]) measures the statistics named instead"


def stats_listing() -> str:
    """The listing ``bertwatch stats`` prints: a legend, then each family's title and one line per statistic
    (``*`` when it is measured by default, its name and definition); a family that ``stats=`` cannot select says
    which option measures it.

    Example:
        >>> print("\\n".join(stats_listing().splitlines()[2:4]))
        Special tokens
        * cls_mass             Attention mass on [CLS], mean over queries (Clark et al. 2019, Fig. 2).
    """
    from bertwatch.core.stat_names import ALL_STATS, DEFAULT_STATS, DEFINITIONS, STAT_GROUPS

    width = max(len(name) for _, names in STAT_GROUPS for name in names)
    blocks = [LEGEND]
    for title, names in STAT_GROUPS:
        heading = title if set(names) <= set(ALL_STATS) else f"{title} (measured with --word-classes, not --stats)"
        lines = [f"{'*' if name in DEFAULT_STATS else ' '} {name:<{width}}  {DEFINITIONS[name]}" for name in names]
        blocks.append("\n".join([heading, *lines]))
    return "\n\n".join(blocks)


def cli_stats(argv: Sequence[str]) -> int:
    command_parser(
        prog="bertwatch stats",
        description="List every statistic bertwatch measures, by family, with a one-line definition; * marks the "
        "ones measured by default. Give the names to --stats (bertwatch run) or stats=[...] (Python); "
        "docs/statistics.md has the exact definitions.",
    ).parse_args(list(argv))
    print(stats_listing())
    return 0
