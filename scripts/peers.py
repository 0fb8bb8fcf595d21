#!/usr/bin/env python3
"""The reference training step of `rewind memory` in JAX and PyTorch, beside rewind, in one run.

The network: a momentum stack (v <- mu v + f(x); x <- x + v, f = W2 tanh(W1 x + b1) + b2, width
784, hidden 16) of the given depth, a linear head and softmax cross-entropy on a batch of 128
(pixels uniform in [0, 1), labels j mod 10), float32; Glorot-uniform weights with each map's last
layer scaled by 0.02, zero biases; one step is loss, gradient and an SGD update (lr 0.01,
momentum 0.9). Each peer runs it two ways:

  stored      the framework's own backprop, which keeps every layer's activations;
  reversible  the rewind written by hand: the forward keeps only the output, the backward
              reconstructs each layer's input (x <- x - v; v <- (v - f(x)) / mu) and applies the
              layer's vector-Jacobian product (jax.custom_vjp; a torch.autograd.Function).

Rounds are interleaved (every configuration once per round, each in its own process) and the
report gives per configuration the median over rounds of each run's median step. Not a test:
the machine's other load moves every number; compare ratios within one run.

  pip install 'jax[cpu]'   (and PyTorch: `pip install torch`, or Debian's python3-torch, whose
                            BLAS is slower; the report says which torch it ran)
  scripts/peers.py --rewind build/bin/rewind --depth 512 --rounds 3
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

WIDTH, HIDDEN, CLASSES = 784, 16, 10
PEERS = ["jax-stored", "jax-reversible", "torch-stored", "torch-reversible"]


def initial(depth, batch, seed=1):
    """Parameters and batch as numpy arrays (samples in rows): the scheme rewind uses."""
    import numpy as np

    rng = np.random.default_rng(seed)

    def glorot(rows, cols, scale=1.0):
        a = scale * np.sqrt(6.0 / (rows + cols))
        return rng.uniform(-a, a, size=(rows, cols)).astype(np.float32)

    w1 = np.stack([glorot(HIDDEN, WIDTH) for _ in range(depth)])
    w2 = np.stack([glorot(WIDTH, HIDDEN, 0.02) for _ in range(depth)])
    b1 = np.zeros((depth, HIDDEN), np.float32)
    b2 = np.zeros((depth, WIDTH), np.float32)
    head = glorot(CLASSES, WIDTH)
    head_b = np.zeros(CLASSES, np.float32)
    pixels = np.random.default_rng(7).uniform(0, 1, size=(batch, WIDTH)).astype(np.float32)
    labels = np.arange(batch) % CLASSES
    return (w1, b1, w2, b2, head, head_b), pixels, labels


def time_steps(step, steps):
    step()  # warm-up: compilation, allocators
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def run_jax(reversible, depth, batch, mu, steps):
    import jax
    import jax.numpy as jnp
    from jax import lax

    params, pixels, labels = initial(depth, batch)
    params = tuple(jnp.asarray(p) for p in params)
    x0, y = jnp.asarray(pixels), jnp.asarray(labels)

    def fmap(p, x):
        w1, b1, w2, b2 = p
        return jnp.tanh(x @ w1.T + b1) @ w2.T + b2

    def layer(carry, p):
        x, v = carry
        v = mu * v + fmap(p, x)
        return (x + v, v), None

    def plain_stack(stack, x, v):
        return lax.scan(layer, (x, v), stack)[0]

    @jax.custom_vjp
    def rev_stack(stack, x, v):
        return plain_stack(stack, x, v)

    def rev_fwd(stack, x, v):
        out = plain_stack(stack, x, v)
        return out, (stack, out)  # only the output is kept

    def rev_bwd(res, cot):
        stack, (x, v) = res
        xb, vb = cot

        def back(carry, p):
            x, v, xb, vb = carry
            x_prev = x - v
            f, vjp = jax.vjp(fmap, p, x_prev)
            v_prev = (v - f) / mu
            g = vb + xb  # the cotangent of the new v (x = x_prev + v)
            pb, xfb = vjp(g)
            return (x_prev, v_prev, xb + xfb, mu * g), pb

        (_, _, xb0, vb0), stack_bar = lax.scan(back, (x, v, xb, vb), stack, reverse=True)
        return stack_bar, xb0, vb0

    rev_stack.defvjp(rev_fwd, rev_bwd)
    stack_fn = rev_stack if reversible else plain_stack

    def loss(ps):
        stack, (head, head_b) = ps[:4], ps[4:]
        x, _ = stack_fn(stack, x0, jnp.zeros_like(x0))
        logits = x @ head.T + head_b
        return -jnp.mean(jax.nn.log_softmax(logits)[jnp.arange(batch), y])

    @jax.jit
    def step(ps, bufs):
        value, grads = jax.value_and_grad(loss)(ps)
        bufs = tuple(0.9 * b + g for b, g in zip(bufs, grads))
        return tuple(p - 0.01 * b for p, b in zip(ps, bufs)), bufs, value

    state = [params, tuple(jnp.zeros_like(p) for p in params), None]

    def once():
        state[0], state[1], state[2] = step(state[0], state[1])
        state[2].block_until_ready()

    return time_steps(once, steps), f"jax {jax.__version__} ({jax.default_backend()})", float(state[2])


def run_torch(reversible, depth, batch, mu, steps):
    import torch

    torch.set_num_threads(len(os.sched_getaffinity(0)))
    arrays, pixels, labels = initial(depth, batch)

    def tensor(a, dtype=torch.float32):  # through bytes: a torch built against another numpy ABI still reads them
        return torch.frombuffer(bytearray(a.tobytes()), dtype=dtype).reshape(a.shape).clone()

    params = [tensor(a).requires_grad_() for a in arrays]
    x0, y = tensor(pixels), tensor(labels.astype("int64"), torch.int64)
    opt = torch.optim.SGD(params, lr=0.01, momentum=0.9)

    def fmap(w1, b1, w2, b2, x):
        return torch.tanh(x @ w1.T + b1) @ w2.T + b2

    class Rewind(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, v, w1, b1, w2, b2):
            with torch.no_grad():
                for l in range(depth):
                    v = mu * v + fmap(w1[l], b1[l], w2[l], b2[l], x)
                    x = x + v
            ctx.save_for_backward(x, v, w1, b1, w2, b2)  # only the output and the weights
            return x, v

        @staticmethod
        def backward(ctx, xb, vb):
            x, v, w1, b1, w2, b2 = ctx.saved_tensors
            grads = [torch.zeros_like(t) for t in (w1, b1, w2, b2)]
            for l in reversed(range(depth)):
                x_prev = x - v
                with torch.enable_grad():
                    leaves = [t[l].detach().requires_grad_() for t in (w1, b1, w2, b2)]
                    xp = x_prev.detach().requires_grad_()
                    f = fmap(*leaves, xp)
                    g = vb + xb
                    parts = torch.autograd.grad(f, leaves + [xp], g)
                for k in range(4):
                    grads[k][l] = parts[k]
                x, v = x_prev, (v - f.detach()) / mu
                xb, vb = xb + parts[4], mu * g
            return (xb, vb, *grads)

    def loss():
        w1, b1, w2, b2, head, head_b = params
        if reversible:
            x, _ = Rewind.apply(x0, torch.zeros_like(x0), w1, b1, w2, b2)
        else:  # unbind once: indexing the stacks per layer would make autograd write a whole stack-sized gradient per layer
            layers = list(zip(*(t.unbind(0) for t in (w1, b1, w2, b2))))
            x, v = x0, torch.zeros_like(x0)
            for p in layers:
                v = mu * v + fmap(*p, x)
                x = x + v
        return torch.nn.functional.cross_entropy(x @ head.T + head_b, y)

    last = [0.0]

    def once():
        opt.zero_grad(set_to_none=True)
        value = loss()
        value.backward()
        opt.step()
        last[0] = value.detach()

    return time_steps(once, steps), f"torch {torch.__version__} ({torch.__file__})", float(last[0])


def child(args):
    framework, mode = args.child.split("-")
    run = run_jax if framework == "jax" else run_torch
    ms, what, loss = run(mode == "reversible", args.depth, args.batch, args.mu, args.steps)
    print(json.dumps({"ms": ms, "what": what, "loss": loss}))


def measure_peer(name, args):
    cmd = [sys.executable, __file__, "--child", name, "--depth", str(args.depth), "--batch", str(args.batch),
           "--mu", str(args.mu), "--steps", str(args.steps)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["?"])[-1]
        return None, f"failed: {last}", None
    out = json.loads(done.stdout.strip().splitlines()[-1])
    return out["ms"], out["what"], out["loss"]


def measure_rewind(args):
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "rewind.json")
        subprocess.run([args.rewind, "memory", "--depths", str(args.depth), "--modes", "stored,reversible", "--batch",
                        str(args.batch), "--mu", str(args.mu), "--steps", str(args.steps), "--grain", str(args.grain), "--json", path],
                       check=True, capture_output=True)
        with open(path) as f:
            rows = json.load(f)["rows"]
    return {f"rewind-{r['mode']}": r["step_ms_median"] for r in rows}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rewind", default="build/bin/rewind", help="the rewind program")
    p.add_argument("--depth", type=int, default=512)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--mu", type=float, default=0.9)
    p.add_argument("--steps", type=int, default=3, help="measured steps per run (median)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--grain", type=int, default=0,
                   help="rewind's samples per chunk of a step (0: its default; 64 makes one chunk per thread of a 2-CPU machine at batch 128)")
    p.add_argument("--peers", default=",".join(PEERS), help="which peers, comma-separated")
    p.add_argument("--json", help="write the results here")
    p.add_argument("--check", action="store_true",
                   help="first check each peer's reversible step against its stored one (the loss after the same steps)")
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        return child(args)

    peers = [name for name in args.peers.split(",") if name]
    if args.check:
        for framework in sorted({n.split("-")[0] for n in peers}):
            small = argparse.Namespace(**{**vars(args), "depth": 8, "batch": 16, "steps": 3})
            (_, _, stored), (_, what, rev) = (measure_peer(f"{framework}-{m}", small) for m in ("stored", "reversible"))
            if stored is None or rev is None:
                print(f"check {framework}: {what}")
                continue
            agree = abs(stored - rev) <= 1e-5 * abs(stored)
            print(f"check {framework}: loss after 4 SGD steps at depth 8, stored {stored:.7f}, reversible {rev:.7f}: "
                  f"{'agree' if agree else 'DISAGREE'}")
            if not agree:
                sys.exit(1)
    times = {name: [] for name in ["rewind-stored", "rewind-reversible"] + peers}
    what = {"rewind-stored": args.rewind, "rewind-reversible": args.rewind}
    print(f"depth {args.depth}, batch {args.batch}, width {WIDTH}, hidden {HIDDEN}, float32, mu {args.mu}; "
          f"ms per step (median of {args.steps}), {args.rounds} interleaved rounds, {len(os.sched_getaffinity(0))} CPUs"
          + (f", rewind --grain {args.grain}" if args.grain else ""))
    for r in range(args.rounds):
        for name, ms in measure_rewind(args).items():
            times[name].append(ms)
        for name in peers:
            ms, what[name], _ = measure_peer(name, args)
            if ms is not None:
                times[name].append(ms)
        print(f"round {r + 1}: " + ", ".join(f"{n} {t[-1]:.1f}" for n, t in times.items() if len(t) == r + 1), flush=True)

    medians = {n: statistics.median(t) for n, t in times.items() if t}
    print(f"\n{'configuration':<20} {'ms per step':>12}  {'range':>17}  what")
    for n, t in times.items():
        if t:
            print(f"{n:<20} {medians[n]:>12.1f}  {min(t):>7.1f} to {max(t):>6.1f}  {what[n]}")
        else:
            print(f"{n:<20} {'-':>12}  {'':>17}  {what[n]}")
    best = {}
    for kind in ("stored", "reversible"):
        peer = [n for n in medians if n.endswith(kind) and not n.startswith("rewind")]
        if peer:
            b = min(peer, key=medians.get)
            best[kind] = b
            print(f"rewind {kind} / best peer {kind} ({b}): {medians['rewind-' + kind] / medians[b]:.3f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"config": {"depth": args.depth, "batch": args.batch, "width": WIDTH, "hidden": HIDDEN, "mu": args.mu,
                                  "steps": args.steps, "rounds": args.rounds, "grain": args.grain},
                       "runs_ms": times, "median_ms": medians, "what": what, "best_peer": best}, f, indent=1)


if __name__ == "__main__":
    main()
