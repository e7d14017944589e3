// Model kinds of one's own (docs/cpp-api.md): the registry is a value that refuses a name twice,
// a run trains a kind it was given (and only such a kind), a model's parameter names must be
// unique, a layer whose backward returns a wrongly shaped gradient is named, and a program's main
// turns errors into loom's one line and exit code.
#include <gmock/gmock.h>

#include <cmath>

#include "loom/api/program.h"
#include "loom/api/training.h"
#include "loom/blocks/embedding.h"
#include "loom/blocks/final_norm.h"
#include "loom/blocks/lm_head_loss.h"
#include "loom/dist/null_communicator.h"
#include "loom/models/decoder_kind.h"
#include "loom/nn/gradient_check.h"
#include "loom/plan/planner.h"
#include "loom/train/profile_run.h"
#include "loom/train/trainer.h"
#include "unit/input_error.h"

namespace loom::test {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using loom::testing::input_error;

enum class Fault { None, NarrowGradient, DoubleWeightGradient };

// y = x + x W, with its backward; `fault` makes backward_input return a gradient one column short,
// or backward_weight add twice the weight's gradient.
class Residual final : public nn::Layer {
 public:
  Residual(std::string name, std::string param, int64_t d, Fault fault) : name_(std::move(name)), fault_(fault) {
    w_.name = std::move(param);
    w_.full_shape = {d, d};
    w_.init = nn::Init::Normal;
    w_.init_std = 0.1;
  }
  std::string name() const override { return name_; }
  at::Tensor forward(const at::Tensor& x, const nn::MicroBatch&, nn::Saved& saved) override {
    saved.emplace<State>().x = x;
    return x + at::matmul(x, w_.value);
  }
  at::Tensor backward_input(const at::Tensor& dy, nn::Saved& saved) override {
    saved.get<State>().dy = dy;
    const at::Tensor dx = dy + at::matmul(dy, w_.value.t());
    return fault_ == Fault::NarrowGradient ? dx.narrow(-1, 0, dx.size(-1) - 1) : dx;
  }
  void backward_weight(nn::Saved& saved) override {
    const State& s = saved.get<State>();
    w_.grad.add_(at::mm(s.x.reshape({-1, s.x.size(-1)}).t(), s.dy.reshape({-1, s.dy.size(-1)})),
                 fault_ == Fault::DoubleWeightGradient ? 2.0 : 1.0);
    saved.clear();
  }
  std::vector<nn::Param*> params() override { return {&w_}; }
  nn::Cost cost(int64_t batch, int64_t seq, int64_t dtype_bytes) const override {
    const double flops = 2.0 * static_cast<double>(batch * seq * w_.full_shape[0] * w_.full_shape[1]);
    return {.forward_flops = flops, .backward_input_flops = flops, .backward_weight_flops = flops,
            .saved_bytes = static_cast<double>(batch * seq * w_.full_shape[0] * dtype_bytes)};
  }

 private:
  struct State : nn::SavedState {
    at::Tensor x, dy;
    void for_each_tensor(const nn::TensorVisitor& visit) override { visit("x", x), visit("dy", dy); }
  };
  std::string name_;
  Fault fault_;
  nn::Param w_;
};

struct KindOptions {
  std::string name = "residual";
  Fault fault = Fault::None;
  bool shared_name = false;  // both blocks name their weight "blocks.0.w"
};

class ResidualKind final : public models::DecoderKind {
 public:
  explicit ResidualKind(KindOptions o) : o_(std::move(o)) {}
  std::string_view name() const override { return o_.name; }
  void validate(const Config&) const override {}
  models::Model build(const ModelConfig& m, const models::Parallelism& p) const override {
    models::Model model;
    model.chain.push_back(std::make_unique<blocks::TokenPositionEmbedding>(m.vocab, m.seq_len, m.d_model, p.tp));
    model.chain.push_back(std::make_unique<Residual>("blocks.0", "blocks.0.w", m.d_model, o_.fault));
    model.chain.push_back(
        std::make_unique<Residual>("blocks.1", o_.shared_name ? "blocks.0.w" : "blocks.1.w", m.d_model, Fault::None));
    model.chain.push_back(std::make_unique<blocks::FinalNorm>(m.d_model));
    model.chain.push_back(std::make_unique<blocks::LmHeadLoss>(m.d_model, m.vocab, p.tp));
    return model;
  }

 private:
  KindOptions o_;
};

models::ModelKinds with_residual(KindOptions o = {}) {
  models::ModelKinds kinds = models::ModelKinds::builtin();
  kinds.add(std::make_shared<ResidualKind>(std::move(o)));
  return kinds;
}

Config residual_config() {
  Config c;
  c.model.kind = "residual";
  c.model.vocab = 32;
  c.model.d_model = 8;
  c.model.seq_len = 8;
  c.model.dtype = "float64";
  c.train.steps = 2;
  c.train.global_batch = 2;
  c.train.micro_batch = 1;
  c.train.threads = 1;
  return c;
}

TEST(ModelKinds, TheBuiltinRegistryHoldsLoomsKinds) {
  EXPECT_THAT(models::ModelKinds::builtin().names(), ElementsAre("gpt", "dlrm", "llama"));
  EXPECT_THAT(models::ModelKinds().names(), ElementsAre());
}

TEST(ModelKinds, RefusesAKindRegisteredTwice) {
  models::ModelKinds kinds = with_residual();
  EXPECT_THAT(input_error([&] { kinds.add(std::make_shared<ResidualKind>(KindOptions{})); }),
              HasSubstr("model kind \"residual\" is registered twice"));
  EXPECT_THAT(input_error([&] { kinds.add(std::make_shared<ResidualKind>(KindOptions{.name = "gpt"})); }),
              HasSubstr("model kind \"gpt\" is registered twice"));
  EXPECT_THAT(input_error([&] { kinds.add(std::make_shared<ResidualKind>(KindOptions{.name = ""})); }),
              HasSubstr("empty name"));
  EXPECT_THAT(kinds.names(), ElementsAre("gpt", "dlrm", "llama", "residual"));
  EXPECT_FALSE(models::ModelKinds::builtin().contains("residual")) << "a copy's additions stay in the copy";
}

TEST(ModelKinds, TrainsAKindItWasGivenAndOnlySuchAKind) {
  dist::NullCommunicator alone;
  EXPECT_THAT(input_error([&] { Training refused(residual_config(), alone); }),
              HasSubstr("model.kind = \"residual\" is not one of: gpt, dlrm, llama"));
  Training training(residual_config(), alone, with_residual());
  std::vector<int64_t> seen;
  const std::vector<StepMetrics> steps = training.run({.on_step = [&](const StepMetrics& m) { seen.push_back(m.step); }});
  EXPECT_THAT(seen, ElementsAre(1, 2)) << "the metrics callback sees every step";
  ASSERT_EQ(steps.size(), 2u);
  EXPECT_TRUE(std::isfinite(steps[1].loss) && steps[1].loss > 0);
  EXPECT_NE(steps[0].loss, steps[1].loss) << "the first step changed the weights";
  const std::vector<ParameterValue> params = training.parameters();
  EXPECT_TRUE(std::any_of(params.begin(), params.end(), [](const ParameterValue& p) { return p.name == "blocks.1.w"; }));
}

// The planner (parallel.auto's search), the simulator and the profiler know the kinds they are
// given and no others: none falls back to loom's built-in kinds.
TEST(ModelKinds, ThePlannerSimulatorAndProfilerTakeTheKindsTheyAreGiven) {
  const models::ModelKinds kinds = with_residual();
  const plan::Cluster cluster{.name = "ideal",
                              .devices_per_node = 8,
                              .peak_flops = {{DType::Float32, 1e12}, {DType::Float64, 1e12}},
                              .memory_bytes = 64e9,
                              .memory_bytes_per_s = 1e11,
                              .intra_node = {.bytes_per_s = 1e10, .latency_s = 0},
                              .inter_node = {.bytes_per_s = 1e10, .latency_s = 0},
                              .host_bytes_per_s = 1e10};
  Config c = residual_config();
  const std::string unknown = "model.kind = \"residual\" is not one of: gpt, dlrm, llama";
  EXPECT_THAT(input_error([&] { plan::simulate_step(c, cluster, 1); }), HasSubstr(unknown));
  EXPECT_THAT(input_error([&] { plan::plan_layouts(c, cluster, 2, {.top = 1}); }), HasSubstr(unknown));
  const plan::StepPrediction one = plan::simulate_step(c, cluster, 1, kinds);
  EXPECT_GT(one.step_s, 0);
  EXPECT_EQ(one.plan.kind, &kinds.find("residual"));
  const plan::PlanResult planned = plan::plan_layouts(c, cluster, 2, {.top = 3}, kinds);
  ASSERT_FALSE(planned.best.empty());
  for (const plan::StepPrediction& p : planned.best) EXPECT_EQ(p.plan.kind, &kinds.find("residual"));

  dist::NullCommunicator alone;
  EXPECT_THAT(input_error([&] { train::measure_profile(c, alone, {.repeats = 1}); }), HasSubstr(unknown));
  const plan::Profile profile = train::measure_profile(c, alone, {.repeats = 1}, kinds);
  ASSERT_EQ(profile.layers.size(), 5u);  // embedding, the two residual layers, final norm, head
  EXPECT_EQ(profile.layers[1].name, "blocks.0");
}

TEST(ModelKinds, RefusesAParameterNameUsedTwiceBeforeAllocating) {
  const models::ModelKinds kinds = with_residual({.shared_name = true});
  EXPECT_THAT(input_error([&] { train::Trainer::check(residual_config(), 1, 1, "", kinds); }),
              HasSubstr("model.kind = \"residual\": parameter name \"blocks.0.w\" is used twice, by layer \"blocks.0\" "
                        "and by layer \"blocks.1\""));
}

TEST(ModelKinds, NamesALayerWhoseBackwardReturnsAWronglyShapedGradient) {
  dist::NullCommunicator alone;
  Training training(residual_config(), alone, with_residual({.fault = Fault::NarrowGradient}));
  try {
    training.run();
    ADD_FAILURE() << "a wrongly shaped input gradient must stop the run";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("layer \"blocks.0\": backward_input returned a gradient of shape [1, 8, 7] for its "
                                    "input of shape [1, 8, 8]"));
  }
}

// NOTE [Gradient check]: the helper passes a correct layer and catches each kind of wrong one.
TEST(GradientCheck, PassesACorrectLayerAndCatchesWrongOnes) {
  const auto check = [](Fault fault) {
    Residual layer("block", "block.w", 6, fault);
    for (nn::Param* p : layer.params()) nn::initialise(*p, 3, at::kDouble);
    const at::Tensor x = normal_tensor(1, {2, 3, 6}, {}, 1.0, at::kDouble);
    const at::Tensor dy = normal_tensor(2, {2, 3, 6}, {}, 1.0, at::kDouble);
    const auto reference = [](const at::Tensor& in, const std::vector<at::Tensor>& p) { return in + at::matmul(in, p[0]); };
    return nn::check_gradients(layer, x, {}, reference, dy);
  };
  const nn::GradientCheck good = check(Fault::None);
  EXPECT_TRUE(good.passed(1e-12)) << good.describe();

  const nn::GradientCheck doubled = check(Fault::DoubleWeightGradient);
  EXPECT_FALSE(doubled.passed(1e-9)) << doubled.describe();
  ASSERT_EQ(doubled.params.size(), 1u);
  EXPECT_NEAR(doubled.params[0].second, 1.0, 1e-9) << "twice the gradient is 100% off";
  EXPECT_LE(doubled.input, 1e-12) << "the input gradient is still right";

  const nn::GradientCheck narrow = check(Fault::NarrowGradient);
  EXPECT_FALSE(narrow.passed(1e-9));
  EXPECT_THAT(narrow.describe(), HasSubstr("the input gradient has shape [2, 3, 5], the reference's [2, 3, 6]"));
}

TEST(ProgramErrors, OneLineAndTheExitCode) {
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(run_program([](dist::Runtime&) { throw InputError("bad value 3; hint: 4"); }), 2);
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "loom: error: bad value 3; hint: 4\n");
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(run_program([](dist::Runtime&) { throw Error("it broke", 3); }), 3);
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "loom: error: it broke\n");
  int ran = 0;
  EXPECT_EQ(run_program([&](dist::Runtime& runtime) { ran = runtime.world().size(); }), 0);
  EXPECT_EQ(ran, 1) << "started without an MPI launcher: a world of one";
}

}  // namespace
}  // namespace loom::test
