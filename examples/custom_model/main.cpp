// A program of one's own on the installed loom (docs/cpp-api.md): a model kind built from a layer
// loom does not ship (two_experts.h), checked and trained.
//   custom_model gradcheck
//       the layer's hand-written backward against libtorch autograd, in float64
//   custom_model train CONFIG [--set KEY=VALUE]... [--metrics FILE]
//       trains the config (model.kind = "two_experts"); under mpiexec in any layout
//   custom_model equivalence CONFIG [--set KEY=VALUE]...
//       trains it under its layout and serially, and fails unless they agree to 1e-9
#include <loom/loom.h>

#include <iostream>
#include <string>
#include <vector>

#include "two_experts.h"

namespace {

// model.kind = "two_experts": a token language model (its data, throughput and memory figures
// are a decoder's: DecoderKind), its blocks the two-expert layer.
class TwoExpertsKind final : public loom::models::DecoderKind {
 public:
  std::string_view name() const override { return "two_experts"; }

  void validate(const loom::Config& c) const override {
    LOOM_CHECK_INPUT(c.parallel.tp == 1,
                     "model.kind = \"two_experts\" has no tensor-parallel form, but parallel.tp = {}; hint: parallel.tp "
                     "= 1 (dp, pp and sp apply)",
                     c.parallel.tp);
    LOOM_CHECK_INPUT(c.model.d_model > 0 && c.model.ffn_mult > 0 && c.model.n_layers > 0,
                     "model.kind = \"two_experts\" needs model.d_model, model.ffn_mult and model.n_layers > 0 (got {}, "
                     "{}, {})",
                     c.model.d_model, c.model.ffn_mult, c.model.n_layers);
  }

  loom::models::Model build(const loom::ModelConfig& m, const loom::models::Parallelism& p) const override {
    loom::models::Model model;
    const int64_t positions = m.max_positions > 0 ? m.max_positions : m.seq_len;
    model.chain.push_back(std::make_unique<loom::blocks::TokenPositionEmbedding>(
        m.vocab, positions, m.d_model, p.tp, false, loom::parallel::sequence_chunks(p.sp),
        loom::nn::activation_type(m.dtype)));
    for (int64_t i = 0; i < m.n_layers; ++i)
      model.chain.push_back(
          std::make_unique<custom::TwoExperts>("blocks." + std::to_string(i) + ".experts", m.d_model, m.ffn_mult * m.d_model));
    model.chain.push_back(std::make_unique<loom::blocks::FinalNorm>(m.d_model));
    model.chain.push_back(std::make_unique<loom::blocks::LmHeadLoss>(m.d_model, m.vocab, p.tp));
    return model;
  }
};

void gradient_check() {
  custom::TwoExperts layer("check", 8, 12);
  for (loom::nn::Param* p : layer.params()) {
    p->init_std = 0.5;  // larger than training's, so that tanh and the router are far from linear
    loom::nn::initialise(*p, 7, at::kDouble);
  }
  const at::Tensor x = loom::normal_tensor(1, {2, 5, 8}, {}, 1.0, at::kDouble);
  const at::Tensor dy = loom::normal_tensor(2, {2, 5, 8}, {}, 1.0, at::kDouble);
  const loom::nn::GradientCheck check = loom::nn::check_gradients(layer, x, {}, custom::TwoExperts::reference, dy);
  std::cout << "gradient check: " << check.describe() << '\n';
  LOOM_CHECK(check.passed(1e-9), "the gradient check failed (tolerance 1e-9): {}", check.describe());
  std::cout << "gradient check passed\n";
}

struct Args {
  std::string command, config;
  std::vector<std::string> overrides;
  std::string metrics;
};

Args parse(int argc, char** argv) {
  const char* usage = "usage: custom_model gradcheck | train CONFIG [--set KEY=VALUE]... [--metrics FILE] | "
                      "equivalence CONFIG [--set KEY=VALUE]...";
  Args a;
  LOOM_CHECK_INPUT(argc >= 2, "{}", usage);
  a.command = argv[1];
  LOOM_CHECK_INPUT(a.command == "gradcheck" || a.command == "train" || a.command == "equivalence",
                   "unknown command '{}'; {}", a.command, usage);
  for (int i = 2; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--set" && i + 1 < argc) a.overrides.emplace_back(argv[++i]);
    else if (arg == "--metrics" && i + 1 < argc) a.metrics = argv[++i];
    else if (a.config.empty() && !arg.starts_with("-")) a.config = arg;
    else throw loom::InputError(fmt::format("unexpected argument '{}'; {}", arg, usage));
  }
  LOOM_CHECK_INPUT(a.command == "gradcheck" || !a.config.empty(), "{} needs a config file; {}", a.command, usage);
  return a;
}

void train(loom::dist::Runtime& runtime, const Args& args) {
  loom::Config config = loom::load_config_file(args.config);
  for (const std::string& assignment : args.overrides) loom::apply_override(config, assignment);
  loom::models::ModelKinds kinds = loom::models::ModelKinds::builtin();  // loom's kinds, and ours
  kinds.add(std::make_shared<TwoExpertsKind>());
  const bool rank0 = runtime.world().rank() == 0;
  if (args.command == "equivalence") {
    const loom::train::Equivalence eq = loom::train::compare_with_serial(config, runtime.world(), kinds);
    if (rank0) std::cout << "equivalence: " << eq.describe() << '\n';
    // The same result on every rank: they all stop with it, and rank 0 says why.
    if (!eq.passed(1e-9)) throw loom::AgreedError("the layout differs from its serial run: " + eq.describe(), 1);
    if (rank0) std::cout << "equivalence passed (tolerance 1e-9)\n";
    return;
  }
  loom::Training training(config, runtime.world(), kinds);
  loom::RunOptions options{.metrics_path = args.metrics};
  options.on_step = [rank0](const loom::StepMetrics& m) {
    if (rank0) std::cout << fmt::format("step {} loss {:.6f} grad_norm {:.4g}\n", m.step, m.loss, m.grad_norm);
  };
  training.run(options);
}

}  // namespace

int main(int argc, char** argv) {
  return loom::run_program([&](loom::dist::Runtime& runtime) {
    const Args args = parse(argc, argv);
    if (args.command == "gradcheck") gradient_check();
    else train(runtime, args);
  });
}
