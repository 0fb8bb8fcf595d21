#!/usr/bin/env python3
"""The CNNs of `rewind train --net cnn|staged` in PyTorch, beside rewind, in one run: parity and step time.

--net cnn: each 28 x 28 image squeezed twice (torch.nn.functional.pixel_unshuffle, twice) into
16 x 7 x 7; momentum blocks (v <- mu v + f(x); x <- x + v; v starts at 0) whose f is
Conv2d(c, 32, 3, padding=1) -> GroupNorm(8, 32) -> ReLU -> Conv2d(32, c, 3, padding=1); a linear
head over the state flattened channels last (rewind's storage order), softmax cross-entropy.
--net staged: a stem Conv2d(1, 16, 3, padding=1) -> ReLU on the image; three stages of --depth
momentum blocks with the same f at 16 x 28 x 28, 64 x 14 x 14 and 256 x 7 x 7, x and v squeezed
(pixel_unshuffle) between them; the head averages over the positions and applies Linear(256, 10).

  parity  rewind trains the network for a short while and saves its weights as safetensors; the
          twin loads them (by their names: layer{l}.f.{k}.weight or stem.0.weight,
          stage{s}.layer{l}.f.{k}.weight, and head.weight, ...) and classifies
          the same test images: its accuracy must be rewind's (a difference of at most one image
          in a thousand, where float sums in another order tip a tie).
  time    one training step (loss, gradient, SGD update with lr 0.01 and momentum 0.9) on a batch
          of 128 uniform pixels, labels j mod 10: rewind's (`rewind memory --net ...`, stored and
          reversible) and the twin's, stored (autograd keeps every layer) and reversible (a
          torch.autograd.Function per stack that rewinds x <- x - v; v <- (v - f(x)) / mu and
          applies each layer's vector-Jacobian product; staged, like rewind, keeps each stage's
          input). Rounds are interleaved, every configuration in
          its own process; the report gives medians over rounds and rewind / torch per mode.

Not a test: the machine's other load moves every number; compare ratios within one run.

  apt-get install python3-torch   (Debian's build, with its slower BLAS; the report says which
                                   torch it ran), or `pip install torch` (about 3 GB of wheels)
  /usr/bin/python3 scripts/twin_cnn.py --rewind build/bin/rewind --depth 8 --rounds 3
  /usr/bin/python3 scripts/twin_cnn.py --net staged --depth 2 --rounds 3
"""
import argparse
import gzip
import json
import os
import statistics
import struct
import subprocess
import sys
import tempfile
import time

CLASSES, MU = 10, 0.9
DATA = "/usr/share/datasets/fashion-mnist"


def load_safetensors(path):
    """name -> numpy array, from the file's JSON header and little-endian data (no package needed)."""
    import numpy as np

    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    data = blob[8 + n:]
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        if t["dtype"] != "F32":
            raise SystemExit(f"{path}: {name} is {t['dtype']}, the twin reads F32")
        begin, end = t["data_offsets"]
        out[name] = np.frombuffer(data[begin:end], dtype="<f4").reshape(t["shape"]).copy()
    return out


def read_idx(path):
    import numpy as np

    with gzip.open(path, "rb") as f:
        blob = f.read()
    (magic,) = struct.unpack(">I", blob[:4])
    dims = struct.unpack(">" + "I" * (magic & 0xFF), blob[4:4 + 4 * (magic & 0xFF)])
    return np.frombuffer(blob[4 + 4 * len(dims):], dtype=np.uint8).reshape(dims)


class Twin:
    """The network's functions over per-layer weights (lists of tensors), NCHW."""

    def __init__(self, torch, depth):
        self.torch, self.F, self.depth = torch, torch.nn.functional, depth

    def inputs(self, images):  # (B, 28, 28) in [0, 1] -> (B, 16, 7, 7)
        x = images.reshape(-1, 1, 28, 28)
        return self.F.pixel_unshuffle(self.F.pixel_unshuffle(x, 2), 2)

    def f(self, w, x):  # w: conv0 weight, bias, norm weight, bias, conv3 weight, bias
        F = self.F
        h = F.relu(F.group_norm(F.conv2d(x, w[0], w[1], padding=1), 8, w[2], w[3], eps=1e-5))
        return F.conv2d(h, w[4], w[5], padding=1)

    def stack(self, layers, x, v=None):
        v = self.torch.zeros_like(x) if v is None else v
        for w in layers:
            v = MU * v + self.f(w, x)
            x = x + v
        return x, v

    def logits(self, head, x):  # the state flattened channels last, as rewind stores it
        return x.permute(0, 2, 3, 1).reshape(x.shape[0], -1) @ head[0].T + head[1]


class StagedTwin(Twin):
    """The staged network: stem, stages of momentum blocks with squeezes between them, pooled head."""

    STAGES = 3

    def inputs(self, images):  # (B, 28, 28) -> (B, 1, 28, 28)
        return images.reshape(-1, 1, 28, 28)

    def stem(self, w, images):
        return self.F.relu(self.F.conv2d(images, w[0], w[1], padding=1))

    def squeeze(self, x, v):
        return self.F.pixel_unshuffle(x, 2), self.F.pixel_unshuffle(v, 2)

    def network(self, stem, stages, images, run_stack=None):
        run_stack = run_stack or self.stack
        x, v = self.stem(stem, images), None
        for s, layers in enumerate(stages):
            if s > 0:
                x, v = self.squeeze(x, v)
            x, v = run_stack(layers, x, v if v is not None else self.torch.zeros_like(x))
        return x

    def logits(self, head, x):  # average over the positions, then linear
        return x.mean((2, 3)) @ head[0].T + head[1]


def f_weights(t, prefix):
    return [t[f"{prefix}f.{k}.{n}"] for k, n in ((0, "weight"), (0, "bias"), (1, "weight"), (1, "bias"), (3, "weight"), (3, "bias"))]


def staged_weights_from(torch, tensors, depth):
    t = {k: torch.from_numpy(v) for k, v in tensors.items()}
    stages = [[f_weights(t, f"stage{s + 1}.layer{l}.") for l in range(depth)] for s in range(StagedTwin.STAGES)]
    return [t["stem.0.weight"], t["stem.0.bias"]], stages, [t["head.weight"], t["head.bias"]]


def weights_from(torch, tensors, depth):
    t = {k: torch.from_numpy(v) for k, v in tensors.items()}
    layers = [[t[f"layer{l}.f.{k}.{n}"] for k, n in ((0, "weight"), (0, "bias"), (1, "weight"), (1, "bias"), (3, "weight"), (3, "bias"))]
              for l in range(depth)]
    return layers, [t["head.weight"], t["head.bias"]]


def parity(args):
    import numpy as np
    import torch

    with tempfile.TemporaryDirectory() as tmp:
        weights, report = os.path.join(tmp, "w.safetensors"), os.path.join(tmp, "train.json")
        subprocess.run([args.rewind, "train", "--net", args.net, "--depth", str(args.depth), "--epochs", "1", "--lr", "1e-3",
                        "--train-limit", str(args.train_limit), "--test-limit", str(args.test_limit), "--mode", "reversible",
                        "--save", weights, "--json", report], check=True, capture_output=True)
        tensors = load_safetensors(weights)
        with open(report) as f:
            theirs = json.load(f)["final"]["reversible"]["test_acc"]
    images = read_idx(f"{DATA}/t10k-images-idx3-ubyte.gz")[:args.test_limit].astype(np.float32) / 255.0
    labels = read_idx(f"{DATA}/t10k-labels-idx1-ubyte.gz")[:args.test_limit].astype(np.int64)
    with torch.no_grad():
        if args.net == "staged":
            twin = StagedTwin(torch, args.depth)
            stem, stages, head = staged_weights_from(torch, tensors, args.depth)
            x = twin.network(stem, stages, twin.inputs(torch.from_numpy(images)))
        else:
            twin = Twin(torch, args.depth)
            layers, head = weights_from(torch, tensors, args.depth)
            x, _ = twin.stack(layers, twin.inputs(torch.from_numpy(images)))
        ours = float((twin.logits(head, x).argmax(1) == torch.from_numpy(labels)).float().mean())
    agree = abs(ours - theirs) <= 1e-3 + 1e-9
    print(f"parity: rewind's weights after one epoch on {args.train_limit} images (depth {args.depth}), test accuracy on "
          f"{args.test_limit} test images: rewind {100 * theirs:.2f}%, torch twin {100 * ours:.2f}%: {'agree' if agree else 'DISAGREE'}")
    return agree


def stack_rewind(torch, twin, depth):
    """A torch.autograd.Function over one stack of `depth` blocks: (x, v, *weights) -> (x, v), keeping
    only its outputs and the weights; its backward pass rewinds the stack layer by layer."""

    class Rewind(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, v, *flat):
            with torch.no_grad():
                x, v = twin.stack([flat[6 * l:6 * l + 6] for l in range(depth)], x, v)
            ctx.save_for_backward(x, v, *flat)
            return x, v

        @staticmethod
        def backward(ctx, xb, vb):
            x, v, *flat = ctx.saved_tensors
            grads = [None] * len(flat)
            for l in reversed(range(depth)):
                x_prev = x - v
                with torch.enable_grad():
                    leaves = [t.detach().requires_grad_() for t in flat[6 * l:6 * l + 6]]
                    xp = x_prev.detach().requires_grad_()
                    f = twin.f(leaves, xp)
                    g = vb + xb
                    parts = torch.autograd.grad(f, leaves + [xp], g)
                grads[6 * l:6 * l + 6] = parts[:6]
                x, v = x_prev, (v - f.detach()) / MU
                xb, vb = xb + parts[6], MU * g
            return (xb, vb, *grads)

    return Rewind


def run_torch(net, reversible, depth, batch, steps):
    import numpy as np
    import torch

    torch.set_num_threads(len(os.sched_getaffinity(0)))
    torch.manual_seed(1)
    twin = StagedTwin(torch, depth) if net == "staged" else Twin(torch, depth)
    rng = np.random.default_rng(7)
    images = torch.from_numpy(rng.uniform(0, 1, size=(batch, 28, 28)).astype(np.float32))
    y = torch.arange(batch) % CLASSES

    def blocks(c):  # each map's last layer starts small, as rewind's does
        conv0, norm, conv3 = torch.nn.Conv2d(c, 32, 3, padding=1), torch.nn.GroupNorm(8, 32), torch.nn.Conv2d(32, c, 3, padding=1)
        layers = []
        for _ in range(depth):
            conv0.reset_parameters(), norm.reset_parameters(), conv3.reset_parameters()
            with torch.no_grad():
                conv3.weight.mul_(0.02)
            layers.append([p.detach().clone().requires_grad_() for p in (conv0.weight, conv0.bias, norm.weight, norm.bias, conv3.weight, conv3.bias)])
        return layers

    rewind = stack_rewind(torch, twin, depth)

    def run_stack(layers, x, v):
        return rewind.apply(x, v, *[p for w in layers for p in w]) if reversible else twin.stack(layers, x, v)

    x0 = twin.inputs(images)
    if net == "staged":
        stem_conv = torch.nn.Conv2d(1, 16, 3, padding=1)
        stem = [stem_conv.weight.detach().clone().requires_grad_(), stem_conv.bias.detach().clone().requires_grad_()]
        stages = [blocks(16 * 4 ** s) for s in range(StagedTwin.STAGES)]
        head = [(torch.rand(CLASSES, 256) * 0.1 - 0.05).requires_grad_(), torch.zeros(CLASSES, requires_grad=True)]
        params = stem + [p for layers in stages for w in layers for p in w] + head

        def final():
            return twin.network(stem, stages, x0, run_stack)
    else:
        layers = blocks(16)
        head = [(torch.rand(CLASSES, 784) * 0.1 - 0.05).requires_grad_(), torch.zeros(CLASSES, requires_grad=True)]
        params = [p for w in layers for p in w] + head

        def final():
            return run_stack(layers, x0, torch.zeros_like(x0))[0]

    opt = torch.optim.SGD(params, lr=0.01, momentum=0.9)

    def once():
        opt.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(twin.logits(head, final()), y).backward()
        opt.step()

    once()  # warm-up
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        once()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times), f"torch {torch.__version__} ({torch.__file__})"


def measure_torch(mode, args):
    cmd = [sys.executable, __file__, "--child", mode, "--net", args.net, "--depth", str(args.depth), "--batch", str(args.batch), "--steps", str(args.steps)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        return None, "failed: " + (done.stderr.strip().splitlines() or ["?"])[-1]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    return out["ms"], out["what"]


def measure_rewind(args):
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "rewind.json")
        subprocess.run([args.rewind, "memory", "--net", args.net, "--depths", str(args.depth), "--modes", "stored,reversible", "--batch",
                        str(args.batch), "--steps", str(args.steps), "--json", path], check=True, capture_output=True)
        with open(path) as f:
            return {f"rewind-{r['mode']}": r["step_ms_median"] for r in json.load(f)["rows"]}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rewind", default="build/bin/rewind", help="the rewind program")
    p.add_argument("--net", choices=["cnn", "staged"], default="cnn", help="the network of rewind train --net")
    p.add_argument("--depth", type=int, default=8, help="blocks (staged: per stage)")
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--steps", type=int, default=5, help="measured steps per run (median)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--train-limit", type=int, default=6400, help="parity: images rewind trains on")
    p.add_argument("--test-limit", type=int, default=2000, help="parity: test images both classify")
    p.add_argument("--json", help="write the results here")
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        ms, what = run_torch(args.net, args.child == "reversible", args.depth, args.batch, args.steps)
        print(json.dumps({"ms": ms, "what": what}))
        return
    agree = parity(args)
    names = ["rewind-stored", "rewind-reversible", "torch-stored", "torch-reversible"]
    times, what = {n: [] for n in names}, {"rewind-stored": args.rewind, "rewind-reversible": args.rewind}
    shape = "stem conv3x3 16, stages 16x28x28, 64x14x14, 256x7x7" if args.net == "staged" else "state 16x7x7"
    print(f"{args.net}: depth {args.depth}, batch {args.batch}, {shape}, f conv3x3 32 -> group norm 8 -> relu -> conv3x3, float32, mu {MU}; "
          f"ms per step (median of {args.steps}), {args.rounds} interleaved rounds, {len(os.sched_getaffinity(0))} CPUs")
    for r in range(args.rounds):
        for name, ms in measure_rewind(args).items():
            times[name].append(ms)
        for mode in ("stored", "reversible"):
            ms, what[f"torch-{mode}"] = measure_torch(mode, args)
            if ms is not None:
                times[f"torch-{mode}"].append(ms)
        print(f"round {r + 1}: " + ", ".join(f"{n} {t[-1]:.1f}" for n, t in times.items() if len(t) == r + 1), flush=True)
    medians = {n: statistics.median(t) for n, t in times.items() if t}
    print(f"\n{'configuration':<20} {'ms per step':>12}  {'range':>17}  what")
    for n, t in times.items():
        print(f"{n:<20} {medians[n]:>12.1f}  {min(t):>7.1f} to {max(t):>6.1f}  {what[n]}" if t else f"{n:<20} {'-':>12}  {'':>17}  {what.get(n, '')}")
    ratios = {}
    for mode in ("stored", "reversible"):
        if f"torch-{mode}" in medians:
            ratios[mode] = medians[f"rewind-{mode}"] / medians[f"torch-{mode}"]
            print(f"rewind {mode} / torch {mode}: {ratios[mode]:.3f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"config": {"net": args.net, "depth": args.depth, "batch": args.batch, "steps": args.steps, "rounds": args.rounds},
                       "parity": agree, "runs_ms": times, "median_ms": medians, "what": what, "rewind_over_torch": ratios}, f, indent=1)
    if not agree:
        sys.exit(1)


if __name__ == "__main__":
    main()
