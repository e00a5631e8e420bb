"""What the benchmarks share: where the GLUE files are when no flag says."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def default_glue_dir() -> str | None:
    """$GLUE_DIR or $BERTWATCH_DATA/glue, else ../shared/data/glue beside the repository, else None (the Hub)."""
    from bertwatch.data.glue import default_glue_dir as from_environment

    found = from_environment()
    if found is not None:
        return str(found)
    local = REPO.parent / "shared" / "data" / "glue"
    return str(local) if local.is_dir() else None
