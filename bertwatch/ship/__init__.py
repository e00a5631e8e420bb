"""Will this model ship? A fine-tuned classifier exported to ONNX, quantized to INT8 (and optionally pruned), every
variant measured in ONNX Runtime on the CPU against the float32 export: the task metric with its paired-bootstrap
interval, agreement of predictions, latency at batch 1, throughput at batch 32 and file size.

The flow: ``export`` (torch -> ONNX, INT8 quantization) -> ``runtime`` (ONNX Runtime runs and timings) ->
``measure`` (pure statistics) -> ``table`` (the printed table, ``ship.json``); ``shipping.ship_model`` runs it all.

``import bertwatch.ship`` imports neither torch nor onnx; the names below load on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from bertwatch.core.lazy import lazy_names

_LAZY = {
    "ShipOptions": "bertwatch.ship.shipping",
    "ship_model": "bertwatch.ship.shipping",
    "export_onnx": "bertwatch.ship.export",
    "quantize_int8": "bertwatch.ship.export",
    "format_table": "bertwatch.ship.table",
}

__all__ = sorted(_LAZY)

if TYPE_CHECKING:  # pragma: no cover
    from bertwatch.ship.export import export_onnx, quantize_int8
    from bertwatch.ship.shipping import ShipOptions, ship_model
    from bertwatch.ship.table import format_table


__getattr__ = lazy_names(__name__, _LAZY, globals())
