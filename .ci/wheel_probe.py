"""Checks of the wheel check, run with the fresh virtual environment's Python from outside the checkout.

    python wheel_probe.py installed CHECKOUT   bertwatch, its static files and its entry points come from this venv
    python wheel_probe.py port                 print a free TCP port on 127.0.0.1
    python wheel_probe.py page URL             wait for TensorBoard at URL, then fetch the plugin's page, its
                                               ES modules and stylesheet, and its data routes

Each check raises (non-zero exit status) with a message saying what is wrong.
"""

from __future__ import annotations

import json
import socket
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from importlib import metadata
from pathlib import Path


def installed(checkout: str) -> None:
    import bertwatch
    import bertwatch.tb.plugin as plugin

    prefix = Path(sys.prefix).resolve()
    where = Path(bertwatch.__file__).resolve()
    if prefix not in where.parents:
        raise SystemExit(f"bertwatch imported from {where}, not from the virtual environment {prefix}")
    if Path(checkout).resolve() in where.parents:
        raise SystemExit(f"bertwatch imported from the checkout ({where})")
    tb = where.parent / "tb"
    missing = [name for name in [*plugin.STATIC_FILES, "index.js"] if not (tb / plugin.frontend_path(name)).is_file()]
    if missing:
        raise SystemExit(f"static files missing from the installed package: {missing}")
    points = {e.name: e.value for e in metadata.entry_points(group="tensorboard_plugins")}
    if points.get("bertwatch") != "bertwatch.tb.plugin:BertwatchPlugin":
        raise SystemExit(f"tensorboard_plugins entry points: {points}")
    print(f"bertwatch {metadata.version('bertwatch')} from {where.parent}; {len(plugin.STATIC_FILES) + 1} static files")


def port() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        print(s.getsockname()[1])


def get(url: str, timeout: float = 10) -> tuple[str, bytes]:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        if r.status != 200:
            raise SystemExit(f"{url}: HTTP {r.status}")
        body = r.read()
    if not body:
        raise SystemExit(f"{url}: empty answer")
    return r.headers.get("Content-Type", ""), body


def wait_for_listing(base: str, timeout: float = 90) -> dict:
    deadline = time.time() + timeout
    last = "no answer"
    while time.time() < deadline:
        try:
            listing = json.loads(get(base + "/data/plugins_listing", timeout=3)[1])
            if listing.get("bertwatch", {}).get("enabled"):
                return listing
            last = f"plugins_listing: {sorted(listing)}"
        except (OSError, ValueError) as e:
            last = repr(e)
        time.sleep(0.5)
    raise SystemExit(f"TensorBoard at {base} did not list bertwatch as enabled within {timeout:.0f} s ({last})")


def page(base: str) -> None:
    import bertwatch.tb.plugin as plugin

    listing = wait_for_listing(base)
    module = listing["bertwatch"]["loading_mechanism"]["module_path"]
    _, entry = get(base + "/data/plugin_entry.html?name=bertwatch")
    if b"index.js" not in entry:
        raise SystemExit("the plugin's entry page does not load index.js")
    kind, index = get(base + module)
    if "javascript" not in kind or b"render" not in index:
        raise SystemExit(f"{module}: {kind}, {len(index)} bytes, no render()")
    for name, mime in sorted(plugin.STATIC_FILES.items()):
        kind, body = get(f"{base}/data/plugin/bertwatch/static/{name}")
        if not kind.startswith(mime):
            raise SystemExit(f"static/{name}: {kind}, expected {mime}")
    tags = json.loads(get(base + "/data/plugin/bertwatch/tags")[1])
    grids = {run: [t for t in ts if t.startswith("bertwatch/heads/")] for run, ts in tags["runs"].items()}
    run, heads = next(((r, ts) for r, ts in grids.items() if ts), (None, []))
    if run is None:
        raise SystemExit(f"/tags lists no head grid: {tags}")
    query = urllib.parse.urlencode({"run": run, "tag": heads[0]})
    steps = json.loads(get(f"{base}/data/plugin/bertwatch/steps?{query}")[1])
    if not steps.get("steps"):
        raise SystemExit(f"/steps of {run} {heads[0]}: {steps}")
    grid = json.loads(get(f"{base}/data/plugin/bertwatch/grid?{query}")[1])
    if (grid.get("layers"), grid.get("heads"), len(grid.get("values") or [])) != (2, 4, 2):
        raise SystemExit(f"/grid of {run} {heads[0]}: expected 2 layers x 4 heads, got {grid}")
    print(
        f"page, {module} ({len(index)} bytes) and {len(plugin.STATIC_FILES)} static files served; run {run!r}: "
        f"{len(heads)} head grids, {heads[0]} at steps {steps['steps']}, a 2 x 4 grid"
    )


if __name__ == "__main__":
    command, *rest = sys.argv[1:]
    {"installed": installed, "port": port, "page": page}[command](*rest)
