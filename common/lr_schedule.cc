#include "common/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numbers>
#include <set>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/decimal.h"

namespace pst::common {
namespace {

constexpr const char* kKinds =
    "constant, step, multistep, exponential, cosine, polynomial, piecewise";

bool PositiveFinite(float f) { return std::isfinite(f) && f > 0; }

absl::Status Bad(absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("lr_schedule: ", what));
}

// The keys each kind takes besides the ones every kind does.
const std::set<std::string>& KeysOf(const std::string& kind) {
  static const auto* keys = new std::map<std::string, std::set<std::string>>{
      {"constant", {}},           {"step", {"gamma"}}, {"multistep", {"gamma"}},
      {"exponential", {"gamma"}}, {"cosine", {"min"}}, {"polynomial", {"min", "power"}},
      {"piecewise", {"values"}},
  };
  return keys->at(kind);
}

}  // namespace

absl::Status CheckLrSchedule(const proto::LrSchedule& s) {
  const std::string& kind = s.kind();
  if (!kind.empty() && kind != "constant" && kind != "step" && kind != "multistep" &&
      kind != "exponential" && kind != "cosine" && kind != "polynomial" && kind != "piecewise") {
    return Bad(absl::StrCat("unknown kind '", kind, "' (known: ", kKinds, ")"));
  }
  if (s.every() < 0) return Bad(absl::StrCat("every must be >= 0, got ", s.every()));
  if (s.warmup() < 0) return Bad(absl::StrCat("warmup must be >= 0, got ", s.warmup()));
  if (!(s.warmup_start() >= 0 && s.warmup_start() <= 1)) {
    return Bad(absl::StrCat("warmup_start must be in [0, 1], got ", s.warmup_start()));
  }
  if ((kind == "step" || kind == "multistep" || kind == "exponential") &&
      !PositiveFinite(s.gamma())) {
    return Bad(absl::StrCat(kind, " needs a gamma that is positive and finite, got ", s.gamma()));
  }
  if (kind == "step" && s.step_size() < 1) {
    return Bad(absl::StrCat("step needs a step size of at least 1, got ", s.step_size()));
  }
  if (kind == "multistep") {
    if (s.milestones().empty()) return Bad("multistep needs milestones");
    for (int i = 0; i < s.milestones_size(); ++i) {
      if (s.milestones(i) < 0 || (i > 0 && s.milestones(i) < s.milestones(i - 1))) {
        return Bad("multistep milestones must be >= 0 and in increasing order");
      }
    }
  }
  if (kind == "cosine" || kind == "polynomial") {
    if (s.decay_units() < 1) {
      return Bad(absl::StrCat(kind, " needs decay units of at least 1, got ", s.decay_units()));
    }
    if (!std::isfinite(s.min_lr()) || s.min_lr() < 0) {
      return Bad(absl::StrCat(kind, " min must be >= 0 and finite, got ", s.min_lr()));
    }
  }
  if (!std::isfinite(s.power()) || s.power() < 0) {
    return Bad(absl::StrCat("power must be >= 0 and finite, got ", s.power()));
  }
  if (kind == "piecewise") {
    if (s.values_size() != s.boundaries_size() + 1) {
      return Bad(absl::StrCat("piecewise needs one value more than boundaries, got ",
                              s.values_size(), " values for ", s.boundaries_size(), " boundaries"));
    }
    for (int i = 1; i < s.boundaries_size(); ++i) {
      if (s.boundaries(i) <= s.boundaries(i - 1)) {
        return Bad("piecewise boundaries must increase");
      }
    }
    for (float v : s.values()) {
      if (!PositiveFinite(v)) {
        return Bad(absl::StrCat("piecewise values must be positive and finite, got ", v));
      }
    }
  }
  return absl::OkStatus();
}

double LearningRateAt(double lr, const proto::LrSchedule& s, int64_t step) {
  const int64_t unit = s.every() > 1 ? step / s.every() : step;
  if (unit < s.warmup()) {
    const double start = DecimalValue(s.warmup_start());
    return lr * (start + (1 - start) * static_cast<double>(unit) / static_cast<double>(s.warmup()));
  }
  const int64_t u = unit - s.warmup();
  const std::string& kind = s.kind();
  const double gamma = DecimalValue(s.gamma());
  if (kind == "step") return lr * std::pow(gamma, static_cast<double>(u / s.step_size()));
  if (kind == "multistep") {
    const auto passed =
        std::upper_bound(s.milestones().begin(), s.milestones().end(), u) - s.milestones().begin();
    return lr * std::pow(gamma, static_cast<double>(passed));
  }
  if (kind == "exponential") return lr * std::pow(gamma, static_cast<double>(u));
  const double floor = DecimalValue(s.min_lr());
  const double done = static_cast<double>(std::min(u, s.decay_units())) /
                      static_cast<double>(std::max<int64_t>(s.decay_units(), 1));
  if (kind == "cosine") {
    return floor + (lr - floor) * (1 + std::cos(std::numbers::pi * done)) / 2;
  }
  if (kind == "polynomial") {
    const double power = s.power() == 0 ? 1.0 : DecimalValue(s.power());
    return (lr - floor) * std::pow(1 - done, power) + floor;
  }
  if (kind == "piecewise") {
    const auto i =
        std::lower_bound(s.boundaries().begin(), s.boundaries().end(), u) - s.boundaries().begin();
    return DecimalValue(s.values(static_cast<int>(i)));
  }
  return lr;
}

double ScheduledRate(const proto::OptimizerConfig& optimizer, int64_t step) {
  return LearningRateAt(DecimalValue(optimizer.learning_rate()), optimizer.schedule(), step);
}

bool IsScheduled(const proto::LrSchedule& s) {
  return (!s.kind().empty() && s.kind() != "constant") || s.warmup() > 0;
}

absl::StatusOr<proto::LrSchedule> ParseLrSchedule(absl::string_view text) {
  proto::LrSchedule s;
  if (text.empty()) return s;
  std::set<std::string> seen;
  std::vector<std::pair<std::string, std::string>> items;
  for (absl::string_view item : absl::StrSplit(text, ',')) {
    const std::pair<std::string, std::string> kv = absl::StrSplit(item, absl::MaxSplits(':', 1));
    if (!seen.insert(kv.first).second) return Bad(absl::StrCat("'", kv.first, "' given twice"));
    items.push_back(kv);
  }
  auto integer = [](const std::string& key, const std::string& v) -> absl::StatusOr<int64_t> {
    int64_t n;
    if (!absl::SimpleAtoi(v, &n)) {
      return Bad(absl::StrCat("'", key, ":", v, "' needs a whole number"));
    }
    return n;
  };
  auto real = [](const std::string& key, const std::string& v) -> absl::StatusOr<float> {
    float f;
    if (!absl::SimpleAtof(v, &f)) return Bad(absl::StrCat("'", key, ":", v, "' needs a number"));
    return f;
  };
  // The kind first: it says which other keys belong.
  for (const auto& [key, value] : items) {
    if (key != "constant" && key != "step" && key != "multistep" && key != "exponential" &&
        key != "cosine" && key != "polynomial" && key != "piecewise") {
      continue;
    }
    if (!s.kind().empty()) {
      return Bad(absl::StrCat("two kinds, '", s.kind(), "' and '", key, "'"));
    }
    s.set_kind(key);
    if (key == "constant") {
      if (!value.empty()) return Bad("constant takes no value");
    } else if (key == "step" || key == "cosine" || key == "polynomial") {
      absl::StatusOr<int64_t> n = integer(key, value);
      if (!n.ok()) return n.status();
      key == "step" ? s.set_step_size(*n) : s.set_decay_units(*n);
    } else if (key == "exponential") {
      if (!value.empty()) {
        absl::StatusOr<float> g = real(key, value);
        if (!g.ok()) return g.status();
        s.set_gamma(*g);
      }
    } else {
      for (absl::string_view part : absl::StrSplit(value, '/')) {
        absl::StatusOr<int64_t> n = integer(key, std::string(part));
        if (!n.ok()) return n.status();
        key == "multistep" ? s.add_milestones(*n) : s.add_boundaries(*n);
      }
    }
  }
  const std::string kind = s.kind().empty() ? "constant" : s.kind();
  for (const auto& [key, value] : items) {
    if (key == kind) continue;
    if (key == "warmup" || key == "every") {
      absl::StatusOr<int64_t> n = integer(key, value);
      if (!n.ok()) return n.status();
      key == "warmup" ? s.set_warmup(*n) : s.set_every(*n);
      continue;
    }
    if (key == "warmup_start") {
      absl::StatusOr<float> f = real(key, value);
      if (!f.ok()) return f.status();
      s.set_warmup_start(*f);
      continue;
    }
    if (key != "gamma" && key != "min" && key != "power" && key != "values") {
      return Bad(absl::StrCat("unknown item '", key, "' (kinds: ", kKinds,
                              "; others: gamma, min, power, values, warmup, warmup_start, "
                              "every)"));
    }
    if (KeysOf(kind).count(key) == 0) {
      return Bad(absl::StrCat("'", key, "' does not apply to ", kind));
    }
    if (key == "values") {
      for (absl::string_view part : absl::StrSplit(value, '/')) {
        absl::StatusOr<float> f = real(key, std::string(part));
        if (!f.ok()) return f.status();
        s.add_values(*f);
      }
      continue;
    }
    absl::StatusOr<float> f = real(key, value);
    if (!f.ok()) return f.status();
    if (key == "gamma") s.set_gamma(*f);
    if (key == "min") s.set_min_lr(*f);
    if (key == "power") s.set_power(*f);
  }
  if (absl::Status st = CheckLrSchedule(s); !st.ok()) return st;
  return s;
}

std::string LrScheduleString(const proto::LrSchedule& s) {
  std::vector<std::string> items;
  const std::string& kind = s.kind().empty() ? std::string("constant") : s.kind();
  if (kind == "constant") items.push_back("constant");
  if (kind == "step") items.push_back(absl::StrCat("step:", s.step_size()));
  if (kind == "multistep") {
    items.push_back(absl::StrCat("multistep:", absl::StrJoin(s.milestones(), "/")));
  }
  if (kind == "exponential") items.push_back(absl::StrCat("exponential:", s.gamma()));
  if (kind == "cosine" || kind == "polynomial") {
    items.push_back(absl::StrCat(kind, ":", s.decay_units()));
  }
  if (kind == "piecewise") {
    items.push_back(absl::StrCat("piecewise:", absl::StrJoin(s.boundaries(), "/")));
    items.push_back(absl::StrCat("values:", absl::StrJoin(s.values(), "/")));
  }
  if (kind == "step" || kind == "multistep") items.push_back(absl::StrCat("gamma:", s.gamma()));
  if ((kind == "cosine" || kind == "polynomial") && s.min_lr() != 0) {
    items.push_back(absl::StrCat("min:", s.min_lr()));
  }
  if (kind == "polynomial" && s.power() != 0) items.push_back(absl::StrCat("power:", s.power()));
  if (s.warmup() > 0) {
    items.push_back(absl::StrCat("warmup:", s.warmup()));
    if (s.warmup_start() != 0) items.push_back(absl::StrCat("warmup_start:", s.warmup_start()));
  }
  if (s.every() > 1) items.push_back(absl::StrCat("every:", s.every()));
  return absl::StrJoin(items, ",");
}

}  // namespace pst::common
