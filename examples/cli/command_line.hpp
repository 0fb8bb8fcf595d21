// rewind cli: the command line of the rewind program: every subcommand, its options and their
// checks, parsed by CLI11 into the options of commands.hpp. Apart from main.cpp so that the parser
// can be fuzzed on its own (tests/fuzz/fuzz_command_line.cpp).
#pragma once

#include <CLI/CLI.hpp>

#include "commands.hpp"

namespace rewind_cli {

/// The parser and what it fills. parse() throws CLI::ParseError (an unknown option, a value out of
/// range, --help) or CLI::Error; the subcommand parsed is the one whose pointer says parsed().
struct command_line {
  CLI::App app{"rewind: reversible networks with exact gradients and constant activation memory"};
  explain_options explain;
  memory_options memory;
  budget_options budget;
  trajectory_options trajectory;
  train_options train;
  scaling_options scaling;
  demo_options demo;
  CLI::App *ex = nullptr, *me = nullptr, *bu = nullptr, *tr = nullptr, *ta = nullptr, *sc = nullptr, *de = nullptr;
  CLI::Option* data_opt = nullptr;
  CLI::Option *train_depth = nullptr, *train_epochs = nullptr, *train_lr = nullptr, *train_schedule = nullptr;  // --net staged changes their defaults

  command_line() {
    app.require_subcommand(1);

    ex = app.add_subcommand("explain", "the derivation of a block: inverse, adjoint, budget");
    ex->add_option("--block,--net", explain.block, "momentum, leapfrog, coupling, cnn (the block of train --net cnn), staged (the network of train --net staged, stage by stage) or all")
        ->check(CLI::IsMember({"all", "momentum", "leapfrog", "coupling", "cnn", "staged"}));
    ex->add_option("--depth", explain.depth, "--block staged: blocks per stage")->check(CLI::PositiveNumber);
    ex->add_option("--transition", explain.transition, "between the stages of --net staged: squeeze (space to depth, inverted) or strided (a kept 2x2 convolution with stride 2 to 64 channels: 16x28x28, 64x14x14, 64x7x7)")->check(CLI::IsMember({"squeeze", "strided"}));
    ex->add_option("--mu", explain.mu, "momentum coefficient, in (0, 1]");
    ex->add_option("--slope", explain.slope, "slope interval LO,HI of the maps' Jacobian")->delimiter(',')->expected(2);

    me = app.add_subcommand("memory", "activation memory and step time against depth, stored and reversible");
    me->add_option("--depths", memory.depths, "depths, comma-separated")->delimiter(',')->check(CLI::PositiveNumber);
    me->add_option("--modes", memory.modes, "stored, reversible, checkpointed and/or exact, comma-separated")
        ->delimiter(',')->check(CLI::IsMember({"stored", "reversible", "checkpointed", "exact"}));
    me->add_option("--batch", memory.batch, "batch size")->check(CLI::PositiveNumber);
    me->add_option("--width", memory.width, "state width (mlp)")->check(CLI::PositiveNumber);
    me->add_option("--net", memory.net, "mlp, cnn or staged (the networks of train --net, on 28 x 28 inputs; staged: depth blocks per stage)")
        ->check(CLI::IsMember({"mlp", "cnn", "staged"}));
    me->add_option("--transition", memory.transition, "between the stages of --net staged: squeeze (space to depth, inverted) or strided (a kept 2x2 convolution with stride 2 to 64 channels: 16x28x28, 64x14x14, 64x7x7)")->check(CLI::IsMember({"squeeze", "strided"}));
    me->add_option("--grain", memory.grain, "samples per chunk of a CPU step (0: the network's own, 32 for mlp, 8 for cnn and staged)");
    me->add_option("--mu", memory.mu, "momentum coefficient")->check(CLI::Range(0.01, 1.0));
    me->add_option("--exact-loops", memory.exact_loops,
                   "the copy of the exact mode's loops to run: avx512, avx2 or portable (default: the widest this build carries and the CPU runs)")
        ->check(CLI::IsMember({"avx512", "avx2", "portable"}));
    me->add_option("--steps", memory.steps, "measured steps per configuration (median)")->check(CLI::PositiveNumber);
    me->add_option("--rounds", memory.rounds,
                   "run the whole sweep this many times, interleaved (each configuration once per round); "
                   "report the median of the rounds and the spread of each ratio")
        ->check(CLI::Range(1, 99));
    me->add_option("--threads", memory.threads, "thread counts, comma-separated (0: the CPUs this process may use)")
        ->delimiter(',')->check(CLI::NonNegativeNumber);
    me->add_flag("--contend", memory.contend,
                 "also measure every configuration while another process spins on one core (a busy machine)");
    me->add_option("--json", memory.json, "write the results as JSON (CSV and PNG beside it)");
    me->add_option("--device", memory.device, "cpu or cuda")->check(CLI::IsMember({"cpu", "cuda"}));
    me->add_flag("--child", memory.child)->group("");
    me->add_option("--child-mode", memory.child_mode)->group("");

    bu = app.add_subcommand("budget", "the gradient-agreement grid: reversible against stored, beside L*");
    bu->add_option("--mus", budget.mus, "momentum coefficients, comma-separated")->delimiter(',');
    bu->add_option("--depths", budget.depths, "depths, comma-separated")->delimiter(',')->check(CLI::PositiveNumber);
    bu->add_option("--dtype", budget.dtype, "float32 or float64")->check(CLI::IsMember({"float32", "float64"}));
    bu->add_option("--policies", budget.policies, "reversible and/or checkpointed, comma-separated")
        ->delimiter(',')->check(CLI::IsMember({"reversible", "checkpointed", "exact"}));
    bu->add_option("--batch", budget.batch, "batch size")->check(CLI::PositiveNumber);
    bu->add_option("--width", budget.width, "state width")->check(CLI::PositiveNumber);
    bu->add_option("--json", budget.json, "write the results as JSON (CSV and PNG beside it)");
    bu->add_option("--device", budget.device, "cpu or cuda")->check(CLI::IsMember({"cpu", "cuda"}));

    tr = app.add_subcommand("trajectory", "the rewind error along a trajectory of 2-D particles");
    tr->add_option("--particles", trajectory.particles, "number of particles")->check(CLI::PositiveNumber);
    tr->add_option("--depth", trajectory.depth, "layers")->check(CLI::PositiveNumber);
    tr->add_option("--mus", trajectory.mus, "momentum coefficients, comma-separated (leapfrog is added as mu = 1)")->delimiter(',');
    tr->add_option("--json", trajectory.json, "write the results as JSON (CSV and PNG beside it)");

    ta = app.add_subcommand("train", "train on Fashion-MNIST (or a built-in synthetic problem), both modes on one schedule");
    ta->add_option("--net", train.net, "mlp (momentum, f: 784 -> 16 -> tanh -> 784), cnn (the image squeezed to 16x7x7, f: conv3x3 32 -> group norm 8 -> relu -> conv3x3) or staged (a stem conv3x3 16 at 28x28, three stages of --depth blocks with cnn's f at 16x28x28, 64x14x14 and 256x7x7, squeezes between them, pooled head)")
        ->check(CLI::IsMember({"mlp", "cnn", "staged"}));
    train_depth = ta->add_option("--depth", train.depth, "layers (--net staged: blocks per stage; default 2 there)")->check(CLI::PositiveNumber);
    ta->add_option("--mu", train.mu, "momentum coefficient")->check(CLI::Range(0.01, 1.0));
    ta->add_option("--mode", train.mode, "stored, reversible, checkpointed, exact or both (stored and reversible)")
        ->check(CLI::IsMember({"stored", "reversible", "checkpointed", "exact", "both"}));
    train_epochs = ta->add_option("--epochs", train.epochs, "epochs (--net staged: default 6)")->check(CLI::PositiveNumber);
    ta->add_option("--batch", train.batch, "batch size")->check(CLI::PositiveNumber);
    ta->add_option("--transition", train.transition, "between the stages of --net staged: squeeze (space to depth, inverted) or strided (a kept 2x2 convolution with stride 2 to 64 channels: 16x28x28, 64x14x14, 64x7x7)")->check(CLI::IsMember({"squeeze", "strided"}));
    ta->add_option("--grain", train.grain, "samples per chunk of a CPU step (0: the network's own, 32 for mlp, 8 for cnn and staged)");
    train_lr = ta->add_option("--lr", train.lr, "Adam learning rate (--net staged: default 2e-3)")->check(CLI::PositiveNumber);
    train_schedule = ta->add_option("--lr-schedule", train.lr_schedule, "constant, or cosine (decayed along half a cosine to 0 at the last step; --net staged: the default)")
        ->check(CLI::IsMember({"constant", "cosine"}));
    ta->add_option("--augment", train.augment, "none, or flip (each training image mirrored left to right with probability 1/2, drawn anew each epoch from the seed; mlp and staged)")
        ->check(CLI::IsMember({"none", "flip"}));
    data_opt = ta->add_option("--data", train.data, "folder of the Fashion-MNIST IDX files (gzip or not)");
    ta->add_flag("--synthetic", train.synthetic, "train on the built-in synthetic 10-class problem");
    ta->add_option("--train-limit", train.train_limit, "use only the first N training samples (0: all)");
    ta->add_option("--test-limit", train.test_limit, "evaluate on the first N test samples (0: all)");
    ta->add_option("--seed", train.seed, "seed of the weights and of the shuffling");
    ta->add_option("--json", train.json, "write the results as JSON (CSV and PNG beside it)");
    ta->add_option("--device", train.device, "cpu or cuda")->check(CLI::IsMember({"cpu", "cuda"}));
    ta->add_option("--save", train.save,
                   "write the trained weights to FILE: safetensors where it ends in .safetensors, else rewind's format "
                   "(with --mode both, one file per mode: FILE with .stored or .reversible before its extension)");

    sc = app.add_subcommand("scaling", "data-parallel weak scaling over MPI: step time, bytes all-reduced, overlap");
    sc->add_option("--ranks", scaling.ranks, "rank counts, comma-separated (each a job started with mpirun)")->delimiter(',')->check(CLI::PositiveNumber);
    sc->add_option("--depth", scaling.depth, "layers")->check(CLI::PositiveNumber);
    sc->add_option("--batch", scaling.batch, "samples per rank")->check(CLI::PositiveNumber);
    sc->add_option("--mu", scaling.mu, "momentum coefficient")->check(CLI::Range(0.01, 1.0));
    sc->add_option("--steps", scaling.steps, "measured steps per job (median)")->check(CLI::PositiveNumber);
    sc->add_option("--mode", scaling.mode, "stored, reversible, checkpointed or exact")
        ->check(CLI::IsMember({"stored", "reversible", "checkpointed", "exact"}));
    sc->add_option("--bucket-kib", scaling.bucket_kib, "all-reduce gradients in buckets of at least this many KiB")->check(CLI::PositiveNumber);
    sc->add_option("--json", scaling.json, "write the results as JSON (CSV beside it)");
    sc->add_flag("--child", scaling.child)->group("");

    de = app.add_subcommand("demo", "the main job: every subcommand at small sizes, into a report folder");
    de->add_option("--out", demo.out, "report folder");
    de->add_flag("--quick", demo.quick, "tiny sizes: the whole report in seconds");
  }
  command_line(const command_line&) = delete;
  command_line& operator=(const command_line&) = delete;

  void parse(int argc, const char* const* argv) {
    app.parse(argc, argv);
    train.data_given = data_opt->count() > 0;
    if (train.net == "staged") {  // its own defaults: an epoch in about 3 minutes on 2 cores, both modes in about 20
      if (!train_depth->count()) train.depth = 2;
      if (!train_epochs->count()) train.epochs = 6;
      if (!train_lr->count()) train.lr = 2e-3;
      if (!train_schedule->count()) train.lr_schedule = "cosine";
    }
  }
};

}  // namespace rewind_cli
