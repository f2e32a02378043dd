#include "common/initializer.h"

#include <cmath>
#include <numbers>

#include "absl/strings/str_cat.h"

namespace pst::common {
namespace {

uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Fan-in and fan-out as Keras computes them: the last two axes, with any
// leading axes multiplied into the receptive field.
void Fans(const proto::VariableSpec& spec, double* fan_in, double* fan_out) {
  const int rank = spec.shape_size();
  double receptive = 1;
  for (int i = 0; i + 2 < rank; ++i) receptive *= static_cast<double>(spec.shape(i));
  *fan_in = static_cast<double>(spec.shape(rank - 2)) * receptive;
  *fan_out = static_cast<double>(spec.shape(rank - 1)) * receptive;
}

// CounterUniform with its seed already mixed (SplitMix64(seed)), which a
// fill mixes once for all its elements: the same values, one SplitMix64
// per draw instead of two (rows made by pushes into bounded tables fill
// often).
inline double MixedUniform(uint64_t mixed_seed, uint64_t counter) {
  const uint64_t bits = SplitMix64(mixed_seed ^ counter);
  return static_cast<double>(bits >> 11) * 0x1.0p-53;
}

// The uniform fill's loop: `n` values from counters first, first + 1, ...
// in [-limit, limit).
inline void UniformLoop(uint64_t mixed_seed, uint64_t first, double limit, float* out,
                        size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const double u = MixedUniform(mixed_seed, first + i);
    out[i] = static_cast<float>((2.0 * u - 1.0) * limit);
  }
}

// On x86-64 the loop is compiled twice: for the baseline, where it runs
// one value at a time, and for x86-64-v4, whose AVX-512 has the 64-bit
// multiplies and conversions to double that SplitMix64 needs to run 8
// lanes at once; the CPU picks, once. Both give the same bits: every step
// is exact but the multiply by `limit` and the cast to float, which round
// alike in a lane and alone (no fused multiply-add: the product is not
// added to). Picked by a test of the CPU rather than an ifunc, whose
// resolver runs before a sanitizer's runtime is up.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((target("arch=x86-64-v4"))) void UniformLoopV4(uint64_t mixed_seed, uint64_t first,
                                                              double limit, float* out,
                                                              size_t n) {
  UniformLoop(mixed_seed, first, limit, out, n);
}

void FillUniform(uint64_t mixed_seed, uint64_t first, double limit, float* out, size_t n) {
  static const bool v4 = __builtin_cpu_supports("x86-64-v4");
  if (v4) {
    UniformLoopV4(mixed_seed, first, limit, out, n);
  } else {
    UniformLoop(mixed_seed, first, limit, out, n);
  }
}
#else
void FillUniform(uint64_t mixed_seed, uint64_t first, double limit, float* out, size_t n) {
  UniformLoop(mixed_seed, first, limit, out, n);
}
#endif

}  // namespace

double CounterUniform(uint64_t seed, uint64_t counter) {
  return MixedUniform(SplitMix64(seed), counter);
}

absl::Status ValidateInitializer(const proto::VariableSpec& spec) {
  const proto::Initializer& init = spec.initializer();
  switch (init.kind()) {
    case proto::Initializer::ZEROS:
      return absl::OkStatus();
    case proto::Initializer::CONSTANT:
      if (!std::isfinite(init.value())) {
        return absl::InvalidArgumentError(
            absl::StrCat("variable '", spec.name(), "': constant initializer value is not finite"));
      }
      return absl::OkStatus();
    case proto::Initializer::UNIFORM:
    case proto::Initializer::NORMAL:
      if (!std::isfinite(init.scale()) || init.scale() <= 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("variable '", spec.name(), "': initializer scale must be positive, got ",
                         init.scale()));
      }
      return absl::OkStatus();
    case proto::Initializer::GLOROT_UNIFORM:
      if (spec.shape_size() < 2) {
        return absl::InvalidArgumentError(
            absl::StrCat("variable '", spec.name(), "': glorot_uniform needs rank >= 2, got rank ",
                         spec.shape_size()));
      }
      return absl::OkStatus();
    default:
      return absl::InvalidArgumentError(absl::StrCat("variable '", spec.name(),
                                                     "': unknown initializer kind ",
                                                     static_cast<int>(init.kind())));
  }
}

void FillInitialValues(const proto::VariableSpec& spec, int64_t first, std::span<float> out) {
  const proto::Initializer& init = spec.initializer();
  const uint64_t mixed = SplitMix64(init.seed());
  switch (init.kind()) {
    case proto::Initializer::ZEROS:
    case proto::Initializer::CONSTANT: {
      const float v = init.kind() == proto::Initializer::ZEROS ? 0.0f : init.value();
      for (float& x : out) x = v;
      return;
    }
    case proto::Initializer::UNIFORM:
    case proto::Initializer::GLOROT_UNIFORM: {
      double limit = init.scale();
      if (init.kind() == proto::Initializer::GLOROT_UNIFORM) {
        double fan_in, fan_out;
        Fans(spec, &fan_in, &fan_out);
        limit = std::sqrt(6.0 / (fan_in + fan_out));
      }
      FillUniform(mixed, static_cast<uint64_t>(first), limit, out.data(), out.size());
      return;
    }
    case proto::Initializer::NORMAL: {
      // Box-Muller on two independent counter streams.
      for (size_t i = 0; i < out.size(); ++i) {
        const uint64_t k = static_cast<uint64_t>(first) + i;
        const double u1 = 1.0 - MixedUniform(mixed, 2 * k);  // (0, 1]
        const double u2 = MixedUniform(mixed, 2 * k + 1);
        const double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(2 * std::numbers::pi * u2);
        out[i] = static_cast<float>(z * init.scale());
      }
      return;
    }
    default:
      for (float& x : out) x = 0.0f;
  }
}

}  // namespace pst::common
