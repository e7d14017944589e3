#pragma once
// What the whole-step references share (test_reference_step.cpp: GPT and Llama;
// test_reference_dlrm.cpp: DLRM): the learning-rate schedule, global-norm clipping and AdamW
// written from their documented formulas, not by calling loom's, and the comparisons at 1e-9.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <functional>
#include <iostream>
#include <map>
#include <numbers>
#include <string>

#include "loom/core/config.h"
#include "unit/layer_check.h"

namespace loom::train::reference {

using Weights = std::map<std::string, torch::Tensor>;  // by parameter name, full shapes

inline constexpr double kTol = 1e-9;
// AdamW's constants: betas are set in the configs; eps is loom's fixed default.
inline constexpr double kBeta1 = 0.9, kBeta2 = 0.95, kEps = 1e-8;

// ---- The reference optimizer. ----

// Linear warmup to the peak over `warmup` steps, then cosine decay to peak * min_lr_ratio at the
// last step (written here from lr_schedule.h's description, not by calling LrSchedule).
inline double reference_lr(const TrainConfig& t, int64_t step) {
  if (step < t.warmup) return t.lr * static_cast<double>(step + 1) / static_cast<double>(t.warmup);
  const double span = static_cast<double>(std::max<int64_t>(1, t.steps - t.warmup - 1));
  const double progress = std::min(1.0, static_cast<double>(step - t.warmup) / span);
  const double floor = t.lr * t.min_lr_ratio;
  return floor + 0.5 * (t.lr - floor) * (1.0 + std::cos(std::numbers::pi * progress));
}

inline double global_norm(const Weights& grads) {
  double sum = 0;
  for (const auto& [name, g] : grads) sum += g.pow(2).sum().item<double>();
  return std::sqrt(sum);
}

// clip.h's rule: above the limit every gradient is scaled by max_norm / (norm + 1e-6).
inline Weights clipped(const Weights& grads, double max_norm) {
  const double norm = global_norm(grads);
  const double factor = max_norm > 0 && norm > max_norm ? max_norm / (norm + 1e-6) : 1.0;
  Weights out;
  for (const auto& [name, g] : grads) out[name] = g * factor;
  return out;
}

// AdamW as PyTorch defines it: decoupled decay p -= lr wd p on the parameters `decays` names,
// then the bias-corrected Adam step.
class ReferenceAdamW {
 public:
  ReferenceAdamW(double weight_decay, std::function<bool(const std::string&)> decays)
      : weight_decay_(weight_decay), decays_(std::move(decays)) {}
  void step(Weights& values, const Weights& grads, double lr) {
    ++t_;
    const double c1 = 1 - std::pow(kBeta1, static_cast<double>(t_));
    const double c2 = 1 - std::pow(kBeta2, static_cast<double>(t_));
    for (auto& [name, p] : values) {
      const torch::Tensor& g = grads.at(name);
      torch::Tensor& m = m_.try_emplace(name, torch::zeros_like(p)).first->second;
      torch::Tensor& v = v_.try_emplace(name, torch::zeros_like(p)).first->second;
      m = kBeta1 * m + (1 - kBeta1) * g;
      v = kBeta2 * v + (1 - kBeta2) * g * g;
      if (decays_(name)) p = p - lr * weight_decay_ * p;
      p = p - lr * (m / c1) / ((v / c2).sqrt() + kEps);
    }
  }

 private:
  double weight_decay_;
  std::function<bool(const std::string&)> decays_;
  int64_t t_ = 0;
  Weights m_, v_;
};

// ---- Comparison. ----

// Every tensor of `got` against `want` (same names), each within kTol relative error, with the
// parameter named on failure. Returns the largest error, for the log line.
// NOTE: the largest error after an update (about 7e-13 here) is the qkv bias's: its key part
// has an exactly zero gradient in exact arithmetic (a key bias adds one constant to each
// query's scores, which softmax cancels), so both sides hold round-off (near 1e-20) there, and
// AdamW divides it by sqrt(v) + eps, magnifying the difference to about 1e-12 of lr.
inline double expect_all_near(const std::string& what, const Weights& got, const Weights& want) {
  EXPECT_EQ(got.size(), want.size()) << what << ": loom and the reference hold different parameter sets";
  double worst = 0;
  for (const auto& [name, w] : want) {
    const auto it = got.find(name);
    if (it == got.end()) {
      ADD_FAILURE() << what << ": loom has no parameter " << name;
      continue;
    }
    if (it->second.sizes() != w.sizes()) {
      ADD_FAILURE() << what << " of " << name << ": shape " << it->second.sizes() << ", reference " << w.sizes();
      continue;
    }
    const double error = test::relative_error(it->second, w);
    EXPECT_LE(error, kTol) << what << " of " << name << ": relative error " << error;
    worst = std::max(worst, error);
  }
  return worst;
}

inline double expect_loss_near(double got, double want, int64_t step) {
  const double error = std::abs(got - want) / std::abs(want);
  EXPECT_LE(error, kTol) << "loss of step " << step + 1 << ": loom " << got << ", reference " << want;
  return error;
}

inline void expect_norm_near(double got, double want) {
  EXPECT_LE(std::abs(got - want) / want, kTol) << "global gradient norm: loom " << got << ", reference " << want;
}

inline void log_errors(const std::string& test, double loss, double grads, double weights) {
  std::cout << fmt::format("[ reference ] {}: max relative error loss {:.2e}, gradients {:.2e}, weights {:.2e}\n",
                           test, loss, grads, weights);
}

}  // namespace loom::train::reference
