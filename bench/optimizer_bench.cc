// optimizer_bench: the ps's optimizers per element of a dense push, every
// one in both forms, against a reference measured in the same run: the
// loop the ps ran for TensorFlow's Adam before optimizers had forms and
// schedules (float coefficients, no Step, no clip or decay branch), built
// with the same flags. Prints ns per element and the ratio to the
// reference; rounds interleave the cases so a noisy machine hits all alike.
//
//   optimizer_bench [--elements=1048576] [--rounds=5] [--steps=20]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "ps_server/store/optimizer.h"

ABSL_FLAG(int64_t, elements, 1 << 20, "Elements of the variable (float32).");
ABSL_FLAG(int, rounds, 5, "Rounds; each times every case once, in turn.");
ABSL_FLAG(int, steps, 20, "Updates per case and round.");

namespace {

// The pre-forms TensorFlow Adam loop (ps_server/store/optimizer.cc before
// 2026-11-29), verbatim but for its members.
__attribute__((noinline)) void ReferenceAdam(std::span<float> param, std::span<const float> grad,
                                             float* __restrict m, float* __restrict v, int64_t t) {
  const float lr = 0.001f, beta1 = 0.9f, beta2 = 0.999f, epsilon = 1e-7f;
  const double td = static_cast<double>(t);
  const float lr_t =
      static_cast<float>(lr * std::sqrt(1.0 - std::pow(beta2, td)) / (1.0 - std::pow(beta1, td)));
  float* __restrict p = param.data();
  const float* __restrict g = grad.data();
  const size_t n = param.size();
  const float b1 = beta1, b2 = beta2, eps = epsilon;
  for (size_t i = 0; i < n; ++i) {
    m[i] = b1 * m[i] + (1 - b1) * g[i];
    v[i] = b2 * v[i] + (1 - b2) * g[i] * g[i];
    p[i] -= lr_t * m[i] / (std::sqrt(v[i]) + eps);
  }
}

struct Case {
  std::string label;
  std::unique_ptr<pst::ps::Optimizer> optimizer;  // null: the reference
  std::vector<float> param;
  std::vector<std::vector<float>> slots;
  int64_t t = 0;
  std::vector<double> ns_per_element;
};

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const int64_t n = absl::GetFlag(FLAGS_elements);
  const int steps = absl::GetFlag(FLAGS_steps);
  std::vector<float> grad(n);
  for (int64_t i = 0; i < n; ++i) grad[i] = std::sin(static_cast<float>(i)) * 0.01f;

  std::vector<Case> cases;
  cases.push_back({"reference: the old tensorflow adam loop", nullptr, {}, {}, 0, {}});
  for (const char* name : {"sgd", "momentum", "adam", "adamw", "adagrad", "rmsprop", "adadelta"}) {
    for (const char* form : {"tensorflow", "torch"}) {
      pst::proto::OptimizerConfig config;
      config.set_name(name);
      config.set_form(form);
      config.set_learning_rate(0.001f);
      config.set_momentum(std::string(name) == "momentum" ? 0.9f : 0.0f);
      config.set_beta1(0.9f);
      config.set_beta2(0.999f);
      if (std::string(name) == "adamw") config.set_weight_decay(0.01f);
      auto opt = pst::ps::CreateOptimizer(config);
      if (!opt.ok()) {
        std::fprintf(stderr, "%s %s: %s\n", name, form,
                     std::string(opt.status().message()).c_str());
        return 1;
      }
      cases.push_back({std::string(name) + " " + form, *std::move(opt), {}, {}, 0, {}});
    }
  }
  pst::proto::OptimizerConfig decayed;
  decayed.set_name("adam");
  decayed.set_learning_rate(0.001f);
  decayed.set_beta1(0.9f);
  decayed.set_beta2(0.999f);
  decayed.set_weight_decay(0.01f);
  decayed.set_clip_value(1.0f);
  decayed.mutable_schedule()->set_kind("cosine");
  decayed.mutable_schedule()->set_decay_units(1000);
  cases.push_back({"adam tensorflow, clip_value, weight_decay, cosine schedule",
                   *pst::ps::CreateOptimizer(decayed),
                   {},
                   {},
                   0,
                   {}});
  for (Case& c : cases) {
    c.param.assign(n, 0.5f);
    const int slots = c.optimizer == nullptr ? 2 : c.optimizer->num_slots();
    for (int s = 0; s < slots; ++s) {
      c.slots.emplace_back(n, c.optimizer == nullptr ? 0.0f : c.optimizer->SlotInitialValue(s));
    }
  }
  for (int round = 0; round < absl::GetFlag(FLAGS_rounds); ++round) {
    for (Case& c : cases) {
      std::vector<std::span<float>> views(c.slots.begin(), c.slots.end());
      const auto start = std::chrono::steady_clock::now();
      for (int k = 0; k < steps; ++k) {
        ++c.t;
        if (c.optimizer == nullptr) {
          ReferenceAdam(c.param, grad, c.slots[0].data(), c.slots[1].data(), c.t);
        } else {
          c.optimizer->Apply(c.param, grad, views, c.optimizer->StepAt(c.t));
        }
      }
      const double ns =
          std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start)
              .count();
      c.ns_per_element.push_back(ns / (static_cast<double>(n) * steps));
    }
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  const double reference = median(cases[0].ns_per_element);
  std::printf("%lld elements, %d updates a round, median of %d rounds\n", static_cast<long long>(n),
              steps, absl::GetFlag(FLAGS_rounds));
  for (const Case& c : cases) {
    const double ns = median(c.ns_per_element);
    std::printf("%-58s %7.3f ns/element  %5.2fx the reference\n", c.label.c_str(), ns,
                ns / reference);
  }
  return 0;
}
