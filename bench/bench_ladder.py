"""The ladder benchmark: what batch order does to a training loss curve (CPU, a few minutes).

Why the tool exists. Length-grouped batching (every batch's samples of similar length) cuts
padding, but it makes every batch one kind of sample, and LM losses depend on length: a run
of long-sample batches trains and reads as one loss, a run of short ones as another. HF
transformers' ``LengthGroupedSampler`` sorts mega-batches of 50 batches longest first, so
its batches walk down the buckets, long to short, 50 batches at a time: a ladder, which
shows in the loss curve as a sawtooth of bands. `gpu_profiler.BucketBatchSampler` makes
the same bucket-homogeneous batches and lays them out with the interleaving planner, so no
bucket runs back to back longer than the counts force.

What it runs. A synthetic tokenized corpus (``CORPUS_SEED``, the same every run): lengths
log-normal like SFT data (median 16 tokens, sigma 1.124, clipped to [2, 128]; the default
bucket table scaled down 64x: bounds 0,12,19,27,38,52,129, max_seq_len 128, token budget
1024, at most 64 rows), so that the longest bucket makes about half of the batches under
the sampler's default ``fixed`` policy. A sample of length L is a Markov chain over 63
tokens with a shared random transition table sharpened by ``beta(L)``: short samples are
near-templated (low entropy), long samples near free text (high entropy), as short chat
turns and long documents differ in real SFT corpora. The model sees only the tokens, so
each bucket has its own loss level and a run of one bucket pulls the model towards it.

A tiny causal LM (token + position embeddings, one pre-norm transformer layer, d=64, 4
heads; 67k parameters) is trained for one epoch from the same init once per batch order,
AdamW (lr 3e-3, 20 warm-up steps, then constant), token-mean cross-entropy per batch,
``DataLoader(ds, batch_sampler=..., collate_fn=pad)``; the orders:

* ``random``: ``BucketBatchSampler(lengths, order="random")``: the bucket batches shuffled;
* ``hf_length_grouped``: ``LengthGroupedSampler`` (transformers) under torch's
  ``BatchSampler``, batch size = samples / the bucket sampler's batches (the same steps);
* ``stride``: ``BucketBatchSampler(lengths, order="stride")``: the interleaving planner;
* ``hf_shuffled`` (a control; ``--no-control`` skips it): the LengthGroupedSampler's batches
  in random order, which splits HF's held-out gap into its order and its batches.

The two gpu-profiler orders hold the very same batches; only their order differs. Per step:
the loss and the bucket of the batch (of its longest sample, by the sampler's bounds). Per
run: the std of 10-step window means of the loss (what a logger averaging 10 steps plots),
once on the loss minus its centred 50-step rolling mean (``detrended``: the learning curve
removed, the banding left) and once on the raw loss; the longest run of consecutive
same-bucket batches; each bucket's mean training loss over the last 20% of steps; each
bucket's held-out loss after the epoch (2,000 fresh samples). ``--seeds`` seeds (model
init, sampler and HF shuffles; the corpus is fixed): medians with min-max.

Writes ``<out>/ladder.json``, ``<out>/ladder.md`` and ``docs/img/ladder.png`` (the first
seed's loss per step, coloured by bucket, one panel per order of the three). Run it with
torch on the path, e.g. ``PYTHONPATH=. python bench/bench_ladder.py`` (about 100 s on 2 idle
cores). One torch thread by default: these kernels are tiny, and with 2 threads on a shared
2-core machine they ran 5-15x slower whenever another process was busy (``--threads``).
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")  # --threads sets torch's own

import argparse  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from datetime import datetime  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
from torch import nn  # noqa: E402
from torch.utils.data import BatchSampler, DataLoader  # noqa: E402

import gpu_profiler as gp  # noqa: E402
from gpu_profiler.sampler import summarize  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
PNG = ROOT / "docs" / "img" / "ladder.png"
CORPUS_SEED = 20261214
#: The default bucket table (0,770,1216,1728,2432,3296,8193; 8192; 49152; 64) scaled 1/64.
TABLE = {"bounds": (0, 12, 19, 27, 38, 52, 129), "max_seq_len": 128, "token_budget": 1024,
         "max_batch_size": 64}
MEDIAN, SIGMA = 16.0, 1.124
#: Samples per planned batch of this corpus (measured): --steps N makes N * this samples.
SAMPLES_PER_STEP = 25.8
VOCAB = 64  # token 0 pads; 1..63 are the chain's states
BETA_SHORT, BETA_LONG = 2.5, 0.6  # transition sharpness at length 2 and at 128
EVAL_SAMPLES = 2000
LR, WARMUP = 3e-3, 20
WINDOW, TREND = 10, 50
#: Bucket colours, short (blue) to long (red).
PALETTE = ("#253494", "#2c7fb8", "#41b6c4", "#7fbc41", "#f39c12", "#d7301f")
ORDERS = ("random", "hf_length_grouped", "stride")
CONTROL = "hf_shuffled"  # HF's batches in random order: its batching without its order
LABELS = {"random": 'gpu_profiler order="random" (bucket batches, shuffled)',
          "hf_length_grouped": "HF transformers LengthGroupedSampler",
          "stride": 'gpu_profiler order="stride" (interleaving planner)',
          CONTROL: "control: LengthGroupedSampler's batches, shuffled"}


# ------------------------------------------------------------------------------ corpus

def make_lengths(n: int, rng: np.random.Generator) -> np.ndarray:
    return np.clip(np.round(rng.lognormal(np.log(MEDIAN), SIGMA, n)), 2,
                   TABLE["max_seq_len"]).astype(np.int64)


def make_tokens(lengths: np.ndarray, table: np.ndarray, rng: np.random.Generator
                ) -> np.ndarray:
    """Each row a Markov chain of its length (0-padded): next ~ softmax(beta(L) W[cur])."""
    n, top = lengths.size, int(lengths.max())
    frac = (np.log(lengths) - np.log(2)) / (np.log(TABLE["max_seq_len"]) - np.log(2))
    beta = BETA_SHORT + (BETA_LONG - BETA_SHORT) * frac
    x = np.zeros((n, top), np.int64)
    x[:, 0] = rng.integers(1, VOCAB, n)
    for t in range(1, top):
        live = np.flatnonzero(lengths > t)
        logits = beta[live, None] * table[x[live, t - 1] - 1]
        p = np.exp(logits - logits.max(axis=1, keepdims=True))
        c = np.cumsum(p, axis=1)
        u = rng.random(live.size) * c[:, -1]
        x[live, t] = 1 + np.minimum((c < u[:, None]).sum(axis=1), VOCAB - 2)
    return x


def pad(batch: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(inputs, targets, lengths)``: 0-padded to the batch's longest; padding -> -100."""
    lengths = torch.tensor([b.numel() for b in batch])
    x = torch.zeros(len(batch), int(lengths.max()), dtype=torch.long)
    for i, b in enumerate(batch):
        x[i, :b.numel()] = b
    y = x[:, 1:].clone()
    y[y == 0] = -100
    return x[:, :-1], y, lengths


# ------------------------------------------------------------------------------ model

class TinyLM(nn.Module):
    """Token + position embeddings, one causal pre-norm transformer layer, a linear head."""

    def __init__(self, d: int = 64) -> None:
        super().__init__()
        self.tok = nn.Embedding(VOCAB, d)
        self.pos = nn.Embedding(TABLE["max_seq_len"], d)
        self.layer = nn.TransformerEncoderLayer(d, 4, 4 * d, dropout=0.0, batch_first=True,
                                                norm_first=True)
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, VOCAB)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = x.shape[1]
        mask = nn.Transformer.generate_square_subsequent_mask(t)
        h = self.layer(self.tok(x) + self.pos.weight[:t], src_mask=mask, is_causal=True)
        return self.head(self.norm(h))


def ce(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return nn.functional.cross_entropy(model(x).reshape(-1, VOCAB), y.reshape(-1),
                                       ignore_index=-100)


def batch_sampler(order: str, lengths: np.ndarray, seed: int, hf_batch: int) -> Any:
    if order == "hf_length_grouped":
        from transformers.trainer_pt_utils import LengthGroupedSampler

        g = torch.Generator().manual_seed(seed)
        per_sample = LengthGroupedSampler(hf_batch, lengths=lengths.tolist(), generator=g)
        return BatchSampler(per_sample, hf_batch, drop_last=False)
    if order == CONTROL:
        batches = list(batch_sampler("hf_length_grouped", lengths, seed, hf_batch))
        np.random.default_rng(seed).shuffle(batches)  # type: ignore[arg-type]
        return batches
    return gp.BucketBatchSampler(lengths, **TABLE, order=order, seed=seed)


def train(order: str, ds: list[torch.Tensor], lengths: np.ndarray, init: dict, seed: int,
          hf_batch: int, held_out: dict[int, list[torch.Tensor]]) -> dict[str, Any]:
    """One epoch from ``init``; per-step losses and buckets, and per-bucket held-out loss."""
    torch.manual_seed(seed)
    model = TinyLM()
    model.load_state_dict(init)
    opt = torch.optim.AdamW(model.parameters(), lr=LR, betas=(0.9, 0.95), weight_decay=0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / WARMUP))
    edges = np.asarray(TABLE["bounds"])
    loader = DataLoader(ds, batch_sampler=batch_sampler(order, lengths, seed, hf_batch),
                        collate_fn=pad)
    losses, buckets, rows, padded = [], [], [], []
    t0 = time.perf_counter()
    model.train()
    for x, y, n in loader:
        loss = ce(model, x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        losses.append(loss.item())
        buckets.append(int(np.searchsorted(edges, int(n.max()), side="right") - 1))
        rows.append(int(n.numel()))
        padded.append(int(n.numel() * n.max()))
    wall = time.perf_counter() - t0
    model.eval()
    held: dict[str, float] = {}
    everything = [0.0, 0.0]
    with torch.no_grad():
        for b, samples in held_out.items():
            total = count = 0.0
            for i in range(0, len(samples), 64):
                x, y, _ = pad(samples[i:i + 64])
                k = int((y != -100).sum())
                total += ce(model, x, y).item() * k
                count += k
            held[str(b)] = total / count
            everything = [everything[0] + total, everything[1] + count]
    return {"loss": losses, "bucket": buckets, "rows": rows, "padded_tokens": padded,
            "wall_s": wall, "held_out_loss": held,
            "held_out_all": everything[0] / everything[1]}


# ------------------------------------------------------------------------------ stats

def rolling_mean(x: np.ndarray, w: int) -> np.ndarray:
    """Centred ``w``-step mean (fewer steps at the ends)."""
    k = np.ones(w)
    return np.convolve(x, k, "same") / np.convolve(np.ones_like(x), k, "same")


def window_std(x: np.ndarray, w: int = WINDOW) -> float:
    m = x[:x.size // w * w].reshape(-1, w).mean(axis=1)
    return float(m.std(ddof=1))


def longest_run(b: np.ndarray) -> int:
    cut = np.flatnonzero(np.diff(b)) + 1
    return int(np.diff(np.concatenate(([0], cut, [b.size]))).max())


def run_stats(r: dict[str, Any], nb: int) -> dict[str, Any]:
    loss, bucket = np.asarray(r["loss"]), np.asarray(r["bucket"])
    tail = slice(int(loss.size * 0.8), None)
    final = {str(b): float(loss[tail][bucket[tail] == b].mean())
             for b in range(nb) if (bucket[tail] == b).any()}
    return {"steps": int(loss.size), "longest_run": longest_run(bucket),
            "window_std_detrended": window_std(loss - rolling_mean(loss, TREND)),
            "window_std_raw": window_std(loss),
            "window_std_raw_second_half": window_std(loss[loss.size // 2:]),
            "final_bucket_loss": final, "held_out_loss": r["held_out_loss"],
            "held_out_all": r["held_out_all"],
            "final_loss_mean": float(loss[tail].mean()),
            "mean_rows": float(np.mean(r["rows"])),
            "padded_tokens": int(np.sum(r["padded_tokens"])), "wall_s": r["wall_s"]}


def spread(values: list[float]) -> dict[str, float] | None:
    if not values:
        return None
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def aggregate(per_seed: list[dict[str, Any]], nb: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in ("steps", "longest_run", "window_std_detrended", "window_std_raw",
                "window_std_raw_second_half", "final_loss_mean", "held_out_all", "mean_rows",
                "padded_tokens", "wall_s"):
        out[key] = spread([s[key] for s in per_seed])
    for key in ("final_bucket_loss", "held_out_loss"):
        out[key] = {str(b): spread([s[key][str(b)] for s in per_seed if str(b) in s[key]])
                    for b in range(nb)}
    return out


# ------------------------------------------------------------------------------ output

def environment() -> dict[str, Any]:
    import transformers

    def git(*a: str) -> str:
        return subprocess.run(["git", *a], capture_output=True, text=True,
                              cwd=ROOT).stdout.strip()

    cpu = next((ln.split(":", 1)[1].strip() for ln in
                Path("/proc/cpuinfo").read_text().splitlines()
                if ln.startswith("model name")), platform.processor())
    return {"date": datetime.now().strftime("%Y-%m-%d %H:%M"), "git": git("rev-parse", "HEAD"),
            "git_describe": git("describe", "--always", "--dirty"),
            "sampler_changed": git("status", "--porcelain", "--", "gpu_profiler/sampler.py",
                                   "gpu_profiler/analysis/interleave.py"),
            "python": platform.python_version(), "torch": torch.__version__,
            "transformers": transformers.__version__, "numpy": np.__version__,
            "cpu": cpu, "cores": os.cpu_count(), "torch_threads": torch.get_num_threads()}


def fmt(s: dict[str, float], digits: int = 3, ints: bool = False) -> str:
    if ints:
        m, lo, hi = (int(s[k]) for k in ("median", "min", "max"))
        return f"{m} ({lo}-{hi})" if lo != hi else f"{m}"
    return f"{s['median']:.{digits}f} ({s['min']:.{digits}f}-{s['max']:.{digits}f})"


def bucket_names() -> list[str]:
    b = TABLE["bounds"]
    return [f"{lo}-{hi - 1}" for lo, hi in zip(b[:-1], b[1:], strict=True)]


def write_md(path: Path, res: dict[str, Any], command: str) -> None:
    a, c, env = res["orders"], res["corpus"], res["environment"]
    names = bucket_names()
    lines = [
        "# Ladder: batch order and the training loss curve", "",
        f"Generated by `{command}` (`bench/bench_ladder.py`) on {env['date']}, git "
        f"`{env['git_describe']}`; {env['cpu']}, {env['cores']} cores, torch "
        f"{env['torch']} ({env['torch_threads']} thread"
        f"{'s' if env['torch_threads'] != 1 else ''}), transformers "
        f"{env['transformers']}. {res['seeds']} seeds: medians, min-max in brackets. "
        f"Total {res['total_s']:.0f} s.", "",
        f"Corpus: {c['samples']:,} synthetic samples (lengths log-normal, median {MEDIAN:g}, "
        f"sigma {SIGMA}, clipped to [2, 128]; a Markov chain over 63 tokens per sample, "
        f"sharper the shorter: per-token entropy from short to long by bucket "
        f"{', '.join(f'{e:.2f}' for e in c['bucket_entropy'])} nats). Bucket table: the "
        f"default scaled 1/64 (bounds {','.join(map(str, TABLE['bounds']))}, max_seq_len "
        f"{TABLE['max_seq_len']}, token budget {TABLE['token_budget']}, at most "
        f"{TABLE['max_batch_size']} rows). Under the default `fixed` policy the batches per "
        f"bucket are {c['bucket_batches']}: the longest bucket (52-128 tokens) makes "
        f"{c['longest_bucket_share'] * 100:.1f}% of them. HF batch size {c['hf_batch']} "
        f"(samples / the bucket sampler's batches). Model: 1-layer causal transformer "
        f"(d=64, {res['model_params']:,} parameters), AdamW lr {LR}, one epoch, the same init "
        "per seed for every order.", "",
        "| order | steps | longest same-bucket run | std of 10-step means, detrended | "
        "std of 10-step means, raw | held-out loss after the epoch | padded tokens |",
        "|---|--:|--:|--:|--:|--:|--:|"]
    for o in a:
        s = a[o]
        lines.append(f"| {LABELS[o]} | {fmt(s['steps'], ints=True)} | "
                     f"{fmt(s['longest_run'], ints=True)} | {fmt(s['window_std_detrended'])} "
                     f"| {fmt(s['window_std_raw'])} | {fmt(s['held_out_all'])} | "
                     f"{int(s['padded_tokens']['median']):,} |")
    lines += ["", "*Detrended*: the loss minus its centred 50-step rolling mean (the learning "
              "curve out, the banding in), then the std of its 10-step window means; *raw*: "
              "the same on the loss itself (learning curve included). *Padded tokens*: rows x "
              "longest row, summed over the epoch's batches; HF's pad less here, as it sorts "
              "mega-batches of 50 batches by length, where `fixed` batches any samples of one "
              "bucket (and 52-128 is a wide one).", "",
              "Per bucket (tokens): mean training loss over the last 20% of steps / held-out "
              f"loss after the epoch ({EVAL_SAMPLES:,} fresh samples), nats per token, medians. "
              "The training losses compare batches, not buckets, across samplers: an HF batch "
              "of the 0-11 bucket holds the shortest samples of its mega-batch, a "
              "gpu-profiler one any 0-11 samples; the held-out losses are on the same samples.",
              "", "| bucket | " + " | ".join(a) + " |", "|---|" + "--:|" * len(a)]
    for b, name in enumerate(names):
        cells = []
        for o in a:
            f, h = a[o]["final_bucket_loss"][str(b)], a[o]["held_out_loss"][str(b)]
            cells.append(f"{f['median']:.3f} / {h['median']:.3f}" if f else
                         f"- / {h['median']:.3f}")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += ["", "## What it shows", "", res["summary"], "",
              "![loss per step by bucket](../../docs/img/ladder.png)", ""]
    path.write_text("\n".join(lines))


def describe(a: dict[str, Any], hf_batch: int) -> str:
    """What the numbers say, in sentences (the medians over seeds)."""
    std = {o: a[o]["window_std_detrended"]["median"] for o in a}
    run = {o: int(a[o]["longest_run"]["median"]) for o in a}
    held = {o: a[o]["held_out_all"]["median"] for o in a}
    top = str(len(TABLE["bounds"]) - 2)
    gap = a["stride"]["held_out_loss"][top]["median"] - a["stride"]["held_out_loss"]["0"]["median"]
    text = (
        f"Every order batches by length, so each batch is (nearly) one bucket, and the "
        f"buckets' losses differ (held-out, longest bucket minus shortest: {gap:.2f} "
        f"nats/token). HF's LengthGroupedSampler walks down the buckets longest first, 50 "
        f"batches at a time (longest same-bucket run {run['hf_length_grouped']}), and the "
        f"10-step mean of its loss swings with that ladder: std of the detrended 10-step "
        f"means {std['hf_length_grouped']:.3f}, {std['hf_length_grouped'] / std['stride']:.1f}x"
        f" the planner's. gpu-profiler's random order breaks the ladder but leaves chance "
        f"runs (longest {run['random']}, std {std['random']:.3f}); the planner interleaves "
        f"the very same batches (longest run {run['stride']}, std {std['stride']:.3f}, "
        f"{std['random'] / std['stride']:.1f}x lower than random), so the logged curve follows "
        f"the learning, not the bucket. After the epoch, held-out loss is "
        f"{held['random']:.3f} with random order and {held['stride']:.3f} with the "
        f"planner's (the same batches), and HF's ends at {held['hf_length_grouped']:.3f}")
    if CONTROL in a:
        text += (f"; its own batches shuffled end at {held[CONTROL]:.3f}, so its ladder order "
                 f"costs {held['hf_length_grouped'] - held[CONTROL]:.3f} and its batches "
                 f"(always {hf_batch} rows, so in the token-mean loss a token of a short "
                 f"batch weighs more than one of a long batch) the other "
                 f"{held[CONTROL] - held['stride']:.3f}.")
    else:
        text += " (its batches differ too: drop --no-control to split the gap)."
    return text


def plot(path: Path, runs: dict[str, dict[str, Any]], stats: dict[str, dict[str, Any]]
         ) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = bucket_names()
    colors = PALETTE if len(names) == len(PALETTE) else plt.get_cmap("turbo")(
        np.linspace(0.05, 0.95, len(names)))
    fig, axes = plt.subplots(3, 1, figsize=(11, 9), sharex=True, sharey=True)
    for ax, o in zip(axes, ORDERS, strict=True):
        loss, bucket = np.asarray(runs[o]["loss"]), np.asarray(runs[o]["bucket"])
        step = np.arange(loss.size)
        for b, name in enumerate(names):
            m = bucket == b
            ax.scatter(step[m], loss[m], s=7, color=colors[b], label=f"{name} tokens",
                       linewidths=0)
        n = loss.size // WINDOW * WINDOW
        means = loss[:n].reshape(-1, WINDOW).mean(axis=1)
        ax.plot(np.arange(means.size) * WINDOW + WINDOW / 2, means, color="black", lw=1.1,
                label="10-step mean")
        s = stats[o]
        ax.set_title(f"{LABELS[o]}: longest same-bucket run {s['longest_run']}, "
                     f"std of 10-step means {s['window_std_detrended']:.3f} (detrended)",
                     fontsize=10.5, loc="left")
        ax.set_ylabel("loss (nats/token)")
        ax.grid(alpha=0.25)
    axes[-1].set_xlabel("training step (one epoch, same corpus, same init)")
    every = np.concatenate([runs[o]["loss"] for o in ORDERS])
    axes[0].set_ylim(every.min() - 0.1, every.max() + 0.1)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper center", ncol=len(labels), fontsize=9,
               markerscale=2.5, frameon=False, bbox_to_anchor=(0.5, 0.995),
               title="bucket of the batch (by its longest sample)", title_fontsize=9)
    fig.tight_layout(rect=(0, 0, 1, 0.94))
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ------------------------------------------------------------------------------ main

def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--steps", type=int, default=600,
                    help="about this many steps per epoch (sets the corpus size)")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--out", default="bench/results")
    ap.add_argument("--png", default=str(PNG))
    ap.add_argument("--threads", type=int, default=1,
                    help="torch threads (1: on a shared 2-core machine, 2 threads slow these "
                    "tiny kernels 5-15x whenever another process runs)")
    ap.add_argument("--no-control", action="store_true",
                    help=f"skip the control order ({CONTROL}: HF's batches, shuffled)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    run_orders = ORDERS if args.no_control else (*ORDERS, CONTROL)
    t_start = time.perf_counter()
    command = "PYTHONPATH=. python bench/bench_ladder.py" + "".join(
        f" {a}" for a in sys.argv[1:])

    rng = np.random.default_rng(CORPUS_SEED)
    n = int(round(args.steps * SAMPLES_PER_STEP))
    table = rng.standard_normal((VOCAB - 1, VOCAB - 1))
    lengths = make_lengths(n, rng)
    tokens = make_tokens(lengths, table, rng)
    ds = [torch.from_numpy(tokens[i, :k].copy()) for i, k in enumerate(lengths)]
    probe = gp.BucketBatchSampler(lengths, **TABLE)
    bb = list(summarize(probe).bucket_batches)
    share = bb[-1] / sum(bb)
    hf_batch = max(1, round(n / len(probe)))
    print(f"corpus: {n:,} samples, {len(probe)} batches (fixed policy), batches per bucket "
          f"{bb}: longest bucket {share * 100:.1f}% of batches; HF batch size {hf_batch}",
          flush=True)
    edges = np.asarray(TABLE["bounds"])
    nb = edges.size - 1
    # Held-out: fresh samples of the same process; per-token entropy of each bucket's chain.
    ev_len = make_lengths(EVAL_SAMPLES, rng)
    ev_tok = make_tokens(ev_len, table, rng)
    ev_bucket = np.searchsorted(edges, ev_len, side="right") - 1
    held_out = {b: [torch.from_numpy(ev_tok[i, :ev_len[i]].copy())
                    for i in np.flatnonzero(ev_bucket == b)] for b in range(nb)}
    entropy = []
    for b in range(nb):
        frac = (np.log(ev_len[ev_bucket == b]) - np.log(2)) / np.log(TABLE["max_seq_len"] / 2)
        beta = BETA_SHORT + (BETA_LONG - BETA_SHORT) * frac
        logits = beta[:, None, None] * table[None]
        p = np.exp(logits - logits.max(axis=2, keepdims=True))
        p /= p.sum(axis=2, keepdims=True)
        entropy.append(float(-(p * np.log(p)).sum(axis=2).mean()))

    per_seed: dict[str, list[dict[str, Any]]] = {o: [] for o in run_orders}
    first_runs: dict[str, dict[str, Any]] = {}
    n_params = 0
    for seed in range(args.seeds):
        torch.manual_seed(seed)
        model = TinyLM()
        n_params = sum(p.numel() for p in model.parameters())
        init = {k: v.clone() for k, v in model.state_dict().items()}
        for o in run_orders:
            r = train(o, ds, lengths, init, seed, hf_batch, held_out)
            s = run_stats(r, nb)
            per_seed[o].append(s)
            if seed == 0:
                first_runs[o] = r
            print(f"seed {seed} {o:18s} steps {s['steps']:4d} run {s['longest_run']:3d} "
                  f"std10 detrended {s['window_std_detrended']:.3f} raw "
                  f"{s['window_std_raw']:.3f}  held-out {s['held_out_all']:.3f}  "
                  f"{s['wall_s']:.1f} s", flush=True)

    orders = {o: aggregate(per_seed[o], nb) for o in run_orders}
    summary = describe(orders, hf_batch)
    res = {
        "schema": "gpu-profiler/bench-ladder/v1", "command": command, "seeds": args.seeds,
        "environment": environment(),
        "corpus": {"samples": n, "seed": CORPUS_SEED, "median": MEDIAN, "sigma": SIGMA,
                   "vocab": VOCAB, "beta_short": BETA_SHORT, "beta_long": BETA_LONG,
                   "table": {k: list(v) if isinstance(v, tuple) else v
                             for k, v in TABLE.items()},
                   "bucket_batches": bb, "longest_bucket_share": share, "hf_batch": hf_batch,
                   "bucket_samples": np.bincount(np.searchsorted(edges, lengths, "right") - 1,
                                                 minlength=nb).tolist(),
                   "bucket_entropy": entropy},
        "model_params": n_params,
        "training": {"lr": LR, "warmup": WARMUP, "optimizer": "AdamW(0.9, 0.95), wd 0.01",
                     "grad_clip": 1.0, "epochs": 1, "window": WINDOW, "trend": TREND},
        "orders": orders, "per_seed": per_seed,
        "seed0_steps": {o: {"loss": first_runs[o]["loss"], "bucket": first_runs[o]["bucket"]}
                        for o in run_orders},
        "summary": summary,
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    png = Path(args.png)
    png.parent.mkdir(parents=True, exist_ok=True)
    plot(png, first_runs, {o: per_seed[o][0] for o in ORDERS})
    res["total_s"] = time.perf_counter() - t_start
    (out / "ladder.json").write_text(json.dumps(res, indent=1) + "\n")
    write_md(out / "ladder.md", res, command)
    print(summary)
    print(f"wrote {out / 'ladder.json'}, {out / 'ladder.md'}, {png} in {res['total_s']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
