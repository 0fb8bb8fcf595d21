#!/usr/bin/env python3
"""The CNN of `rewind train --net cnn` in PyTorch, beside rewind, in one run: parity and step time.

The network: each 28 x 28 image squeezed twice (torch.nn.functional.pixel_unshuffle, twice) into
16 x 7 x 7; momentum blocks (v <- mu v + f(x); x <- x + v; v starts at 0) whose f is
Conv2d(16, 32, 3, padding=1) -> GroupNorm(8, 32) -> ReLU -> Conv2d(32, 16, 3, padding=1); a linear
head over the state flattened channels last (rewind's storage order), softmax cross-entropy.

  parity  rewind trains the network for a short while and saves its weights as safetensors; the
          twin loads them (by their names: layer{l}.f.{k}.weight, head.weight, ...) and classifies
          the same test images: its accuracy must be rewind's (a difference of at most one image
          in a thousand, where float sums in another order tip a tie).
  time    one training step (loss, gradient, SGD update with lr 0.01 and momentum 0.9) on a batch
          of 128 uniform pixels, labels j mod 10: rewind's (`rewind memory --net cnn`, stored and
          reversible) and the twin's, stored (autograd keeps every layer) and reversible (a
          torch.autograd.Function that rewinds x <- x - v; v <- (v - f(x)) / mu and applies
          each layer's vector-Jacobian product). Rounds are interleaved, every configuration in
          its own process; the report gives medians over rounds and rewind / torch per mode.

Not a test: the machine's other load moves every number; compare ratios within one run.

  apt-get install python3-torch   (Debian's build, with its slower BLAS; the report says which
                                   torch it ran), or `pip install torch` (about 3 GB of wheels)
  /usr/bin/python3 scripts/twin_cnn.py --rewind build/bin/rewind --depth 8 --rounds 3
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

    def stack(self, layers, x):
        v = self.torch.zeros_like(x)
        for w in layers:
            v = MU * v + self.f(w, x)
            x = x + v
        return x, v

    def logits(self, head, x):  # the state flattened channels last, as rewind stores it
        return x.permute(0, 2, 3, 1).reshape(x.shape[0], -1) @ head[0].T + head[1]


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
        subprocess.run([args.rewind, "train", "--net", "cnn", "--depth", str(args.depth), "--epochs", "1", "--lr", "1e-3",
                        "--train-limit", str(args.train_limit), "--test-limit", str(args.test_limit), "--mode", "reversible",
                        "--save", weights, "--json", report], check=True, capture_output=True)
        tensors = load_safetensors(weights)
        with open(report) as f:
            theirs = json.load(f)["final"]["reversible"]["test_acc"]
    images = read_idx(f"{DATA}/t10k-images-idx3-ubyte.gz")[:args.test_limit].astype(np.float32) / 255.0
    labels = read_idx(f"{DATA}/t10k-labels-idx1-ubyte.gz")[:args.test_limit].astype(np.int64)
    twin = Twin(torch, args.depth)
    layers, head = weights_from(torch, tensors, args.depth)
    with torch.no_grad():
        x, _ = twin.stack(layers, twin.inputs(torch.from_numpy(images)))
        ours = float((twin.logits(head, x).argmax(1) == torch.from_numpy(labels)).float().mean())
    agree = abs(ours - theirs) <= 1e-3 + 1e-9
    print(f"parity: rewind's weights after one epoch on {args.train_limit} images (depth {args.depth}), test accuracy on "
          f"{args.test_limit} test images: rewind {100 * theirs:.2f}%, torch twin {100 * ours:.2f}%: {'agree' if agree else 'DISAGREE'}")
    return agree


def run_torch(reversible, depth, batch, steps):
    import numpy as np
    import torch

    torch.set_num_threads(len(os.sched_getaffinity(0)))
    torch.manual_seed(1)
    twin = Twin(torch, depth)
    rng = np.random.default_rng(7)
    images = torch.from_numpy(rng.uniform(0, 1, size=(batch, 28, 28)).astype(np.float32))
    y = torch.arange(batch) % CLASSES
    conv0, norm, conv3 = torch.nn.Conv2d(16, 32, 3, padding=1), torch.nn.GroupNorm(8, 32), torch.nn.Conv2d(32, 16, 3, padding=1)
    layers = []
    for _ in range(depth):
        conv0.reset_parameters(), norm.reset_parameters(), conv3.reset_parameters()
        with torch.no_grad():
            conv3.weight.mul_(0.02)  # each map's last layer starts small, as rewind's does
        layers.append([p.detach().clone().requires_grad_() for p in (conv0.weight, conv0.bias, norm.weight, norm.bias, conv3.weight, conv3.bias)])
    head = [(torch.rand(CLASSES, 784) * 0.1 - 0.05).requires_grad_(), torch.zeros(CLASSES, requires_grad=True)]
    params = [p for w in layers for p in w] + head
    opt = torch.optim.SGD(params, lr=0.01, momentum=0.9)
    x0 = twin.inputs(images)

    class Rewind(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, *flat):
            with torch.no_grad():
                x, v = twin.stack([flat[6 * l:6 * l + 6] for l in range(depth)], x)
            ctx.save_for_backward(x, v, *flat)  # only the output and the weights
            return x

        @staticmethod
        def backward(ctx, xb):
            x, v, *flat = ctx.saved_tensors
            grads, vb = [None] * len(flat), torch.zeros_like(xb)
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
            return (xb, *grads)

    def loss():
        if reversible:
            x = Rewind.apply(x0, *[p for w in layers for p in w])
        else:
            x, _ = twin.stack(layers, x0)
        return torch.nn.functional.cross_entropy(twin.logits(head, x), y)

    def once():
        opt.zero_grad(set_to_none=True)
        loss().backward()
        opt.step()

    once()  # warm-up
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        once()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times), f"torch {torch.__version__} ({torch.__file__})"


def measure_torch(mode, args):
    cmd = [sys.executable, __file__, "--child", mode, "--depth", str(args.depth), "--batch", str(args.batch), "--steps", str(args.steps)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        return None, "failed: " + (done.stderr.strip().splitlines() or ["?"])[-1]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    return out["ms"], out["what"]


def measure_rewind(args):
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "rewind.json")
        subprocess.run([args.rewind, "memory", "--net", "cnn", "--depths", str(args.depth), "--modes", "stored,reversible", "--batch",
                        str(args.batch), "--steps", str(args.steps), "--json", path], check=True, capture_output=True)
        with open(path) as f:
            return {f"rewind-{r['mode']}": r["step_ms_median"] for r in json.load(f)["rows"]}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rewind", default="build/bin/rewind", help="the rewind program")
    p.add_argument("--depth", type=int, default=8)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--steps", type=int, default=5, help="measured steps per run (median)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--train-limit", type=int, default=6400, help="parity: images rewind trains on")
    p.add_argument("--test-limit", type=int, default=2000, help="parity: test images both classify")
    p.add_argument("--json", help="write the results here")
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        ms, what = run_torch(args.child == "reversible", args.depth, args.batch, args.steps)
        print(json.dumps({"ms": ms, "what": what}))
        return
    agree = parity(args)
    names = ["rewind-stored", "rewind-reversible", "torch-stored", "torch-reversible"]
    times, what = {n: [] for n in names}, {"rewind-stored": args.rewind, "rewind-reversible": args.rewind}
    print(f"depth {args.depth}, batch {args.batch}, state 16x7x7, f conv3x3 32 -> group norm 8 -> relu -> conv3x3, float32, mu {MU}; "
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
            json.dump({"config": {"depth": args.depth, "batch": args.batch, "steps": args.steps, "rounds": args.rounds},
                       "parity": agree, "runs_ms": times, "median_ms": medians, "what": what, "rewind_over_torch": ratios}, f, indent=1)
    if not agree:
        sys.exit(1)


if __name__ == "__main__":
    main()
