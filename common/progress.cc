#include "common/progress.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "spdlog/details/null_mutex.h"
#include "spdlog/pattern_formatter.h"
#include "spdlog/sinks/base_sink.h"
#include "spdlog/sinks/dist_sink.h"
#include "spdlog/spdlog.h"

namespace pst::common {
namespace {

constexpr char kEraseToEndOfLine[] = "\x1b[K";
constexpr int kDefaultWidth = 80;

// Writes all of `text` to `fd`, going on after short writes and EINTR.
void WriteAll(int fd, absl::string_view text) {
  while (!text.empty()) {
    const ssize_t n = ::write(fd, text.data(), text.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // nowhere to report it: progress is best effort
    text.remove_prefix(static_cast<size_t>(n));
  }
}

// "N" or "N/T" into *n and *total (0 when absent).
template <typename Int>
bool ParseCount(absl::string_view text, Int* n, Int* total) {
  *total = 0;
  const size_t slash = text.find('/');
  if (slash == absl::string_view::npos) return absl::SimpleAtoi(text, n);
  return absl::SimpleAtoi(text.substr(0, slash), n) &&
         absl::SimpleAtoi(text.substr(slash + 1), total);
}

// Inverse of FormatEta.
bool ParseEta(absl::string_view text, absl::Duration* eta) {
  *eta = absl::ZeroDuration();
  if (text.empty()) return false;
  while (!text.empty()) {
    size_t digits = 0;
    while (digits < text.size() && absl::ascii_isdigit(text[digits])) ++digits;
    int64_t value = 0;
    if (digits == 0 || digits == text.size() || !absl::SimpleAtoi(text.substr(0, digits), &value)) {
      return false;
    }
    switch (text[digits]) {
      case 'h':
        *eta += absl::Hours(value);
        break;
      case 'm':
        *eta += absl::Minutes(value);
        break;
      case 's':
        *eta += absl::Seconds(value);
        break;
      default:
        return false;
    }
    text.remove_prefix(digits + 1);
  }
  return true;
}

}  // namespace

absl::StatusOr<ProgressMode> ParseProgressMode(absl::string_view text) {
  if (text == "auto") return ProgressMode::kAuto;
  if (text == "tty") return ProgressMode::kTty;
  if (text == "plain") return ProgressMode::kPlain;
  if (text == "off") return ProgressMode::kOff;
  return absl::InvalidArgumentError(
      absl::StrCat("--progress must be auto, tty, plain or off, not '", text, "'"));
}

bool AbslParseFlag(absl::string_view text, ProgressMode* mode, std::string* error) {
  absl::StatusOr<ProgressMode> parsed = ParseProgressMode(text);
  if (!parsed.ok()) {
    *error = std::string(parsed.status().message());
    return false;
  }
  *mode = *parsed;
  return true;
}

std::string AbslUnparseFlag(ProgressMode mode) {
  switch (mode) {
    case ProgressMode::kAuto:
      return "auto";
    case ProgressMode::kTty:
      return "tty";
    case ProgressMode::kPlain:
      return "plain";
    case ProgressMode::kOff:
      return "off";
  }
  return "auto";
}

ProgressMode ResolveProgressMode(ProgressMode mode, int fd) {
  if (mode != ProgressMode::kAuto) return mode;
  return isatty(fd) ? ProgressMode::kTty : ProgressMode::kPlain;
}

int TerminalWidth(int fd) {
  winsize size{};
  if (ioctl(fd, TIOCGWINSZ, &size) == 0 && size.ws_col > 0) return size.ws_col;
  return kDefaultWidth;
}

std::string FormatEta(absl::Duration eta) {
  const int64_t secs = std::max<int64_t>(0, std::llround(absl::ToDoubleSeconds(eta)));
  if (secs < 60) return absl::StrCat(secs, "s");
  if (secs < 3600) return absl::StrFormat("%dm%02ds", secs / 60, secs % 60);
  // Past an hour the seconds are noise.
  const int64_t mins = (secs + 30) / 60;
  return absl::StrFormat("%dh%02dm", mins / 60, mins % 60);
}

std::string FormatProgress(const Progress& p) {
  std::string line = absl::StrCat("step ", p.step);
  if (p.total_steps > 0) absl::StrAppend(&line, "/", p.total_steps);
  absl::StrAppend(&line, " | epoch ", p.epoch);
  if (p.total_epochs > 0) absl::StrAppend(&line, "/", p.total_epochs);
  absl::StrAppendFormat(&line, " | loss %.4f | %.0f examples/s", p.loss, p.examples_per_sec);
  if (p.total_steps > 0) {
    absl::StrAppend(&line, " | ETA ", p.eta.has_value() ? FormatEta(*p.eta) : "?");
  }
  absl::StrAppend(&line, " | workers ", p.workers_done, "/", p.workers, " done");
  if (p.learning_rate > 0) absl::StrAppendFormat(&line, " | lr %.2e", p.learning_rate);
  if (!p.tables.empty()) absl::StrAppend(&line, " | ", p.tables);
  if (!p.replicas.empty()) absl::StrAppend(&line, " | ", p.replicas);
  return line;
}

std::optional<Progress> ParseProgress(absl::string_view line) {
  // The fields are found by their names, in FormatProgress's order.
  const size_t start = line.find("step ");
  if (start == absl::string_view::npos) return std::nullopt;
  std::vector<absl::string_view> fields = absl::StrSplit(line.substr(start), " | ");
  Progress p;
  if (!fields.empty() && absl::StartsWith(fields.back(), "backups ")) {
    p.replicas = std::string(fields.back());
    fields.pop_back();
  }
  if (!fields.empty() && absl::StartsWith(fields.back(), "tables ")) {
    p.tables = std::string(fields.back());
    fields.pop_back();
  }
  if (!fields.empty() && absl::StartsWith(fields.back(), "lr ")) {
    absl::string_view lr = fields.back();
    if (!absl::ConsumePrefix(&lr, "lr ") || !absl::SimpleAtod(lr, &p.learning_rate)) {
      return std::nullopt;
    }
    fields.pop_back();
  }
  if (fields.size() != 5 && fields.size() != 6) return std::nullopt;
  size_t f = 0;
  absl::string_view field = fields[f++];
  if (!absl::ConsumePrefix(&field, "step ") || !ParseCount(field, &p.step, &p.total_steps)) {
    return std::nullopt;
  }
  field = fields[f++];
  if (!absl::ConsumePrefix(&field, "epoch ") || !ParseCount(field, &p.epoch, &p.total_epochs)) {
    return std::nullopt;
  }
  field = fields[f++];
  if (!absl::ConsumePrefix(&field, "loss ") || !absl::SimpleAtod(field, &p.loss)) {
    return std::nullopt;
  }
  field = fields[f++];
  if (!absl::ConsumeSuffix(&field, " examples/s") ||
      !absl::SimpleAtod(field, &p.examples_per_sec)) {
    return std::nullopt;
  }
  // ETA is there exactly when the total is.
  if ((fields.size() == 6) != (p.total_steps > 0)) return std::nullopt;
  if (fields.size() == 6) {
    field = fields[f++];
    if (!absl::ConsumePrefix(&field, "ETA ")) return std::nullopt;
    absl::Duration eta;
    if (field != "?") {
      if (!ParseEta(field, &eta)) return std::nullopt;
      p.eta = eta;
    }
  }
  field = fields[f++];
  if (!absl::ConsumePrefix(&field, "workers ") || !absl::ConsumeSuffix(&field, " done") ||
      !ParseCount(field, &p.workers_done, &p.workers)) {
    return std::nullopt;
  }
  return p;
}

std::optional<absl::Duration> EtaEstimator::Update(int64_t step, int64_t total, absl::Time now) {
  if (!started_ || step < last_step_) {
    started_ = true;
    moving_ = false;
    origin_step_ = step;
    origin_time_ = now;
  } else if (!moving_ && step > origin_step_) {
    // The first move. Steps arrive in jumps (each worker's heartbeat), so
    // the rate is measured from one jump seen to the next, not from the
    // last look that saw none, which may have been just before it.
    moving_ = true;
    origin_step_ = step;
    origin_time_ = now;
  }
  last_step_ = step;
  if (total <= 0) return std::nullopt;
  if (step >= total) return absl::ZeroDuration();
  const double elapsed = absl::ToDoubleSeconds(now - origin_time_);
  if (!moving_ || step == origin_step_ || elapsed <= 0) return std::nullopt;
  const double per_sec = static_cast<double>(step - origin_step_) / elapsed;
  return absl::Seconds(static_cast<double>(total - step) / per_sec);
}

std::unique_ptr<ProgressLine> ProgressLine::ForFd(int fd, bool terminal,
                                                  absl::Duration plain_interval) {
  Options options;
  options.terminal = terminal;
  options.write = [fd](absl::string_view text) { WriteAll(fd, text); };
  options.width = [fd] { return TerminalWidth(fd); };
  options.plain_interval = plain_interval;
  return std::make_unique<ProgressLine>(std::move(options));
}

ProgressLine::ProgressLine(Options options) : options_(std::move(options)) {
  next_plain_ = options_.clock() + options_.plain_interval;
}

ProgressLine::~ProgressLine() { Finish(); }

void ProgressLine::Update(const std::string& text) { Show(text, /*force=*/false); }

void ProgressLine::Show(const std::string& text, bool force) {
  if (!options_.terminal) {
    {
      absl::MutexLock lock(&mu_);
      const absl::Time now = options_.clock();
      if (now < next_plain_ && !force) return;
      next_plain_ = now + options_.plain_interval;
    }
    if (options_.emit_plain) {
      options_.emit_plain(text);
    } else {
      options_.write(absl::StrCat(text, "\n"));
    }
    return;
  }
  absl::MutexLock lock(&mu_);
  text_ = text;
  Draw();
}

void ProgressLine::Print(absl::string_view line) {
  Interrupt([&] { options_.write(absl::StrCat(line, "\n")); });
}

void ProgressLine::Interrupt(const std::function<void()>& output) {
  absl::MutexLock lock(&mu_);
  const bool was_drawn = drawn_;
  if (was_drawn) Erase();
  output();
  if (was_drawn) Draw();
}

void ProgressLine::Finish(const std::string& text) {
  Show(text, /*force=*/true);
  Finish();
}

void ProgressLine::Finish() {
  absl::MutexLock lock(&mu_);
  if (!drawn_) return;
  options_.write("\n");
  drawn_ = false;
  text_.clear();
}

void ProgressLine::Draw() {
  // One column is left free: writing the last column makes some terminals
  // wrap, and the next '\r' would then rewrite the wrong line.
  const int width = options_.width ? options_.width() : kDefaultWidth;
  const size_t fits = static_cast<size_t>(std::max(1, width - 1));
  absl::string_view shown = text_;
  if (shown.size() > fits) {
    // Whole fields read better than one cut in the middle.
    shown = shown.substr(0, fits);
    const size_t separator = shown.rfind(" | ");
    if (separator != absl::string_view::npos && separator > 0) shown = shown.substr(0, separator);
  }
  options_.write(absl::StrCat("\r", shown, kEraseToEndOfLine));
  drawn_ = true;
}

void ProgressLine::Erase() {
  options_.write(absl::StrCat("\r", kEraseToEndOfLine));
  drawn_ = false;
}

namespace {

// Hands each message to `inner` with the live line erased meanwhile. Its
// caller, the distribution sink, holds its own mutex, hence null_mutex.
class AroundLiveLineSink : public spdlog::sinks::base_sink<spdlog::details::null_mutex> {
 public:
  AroundLiveLineSink(std::shared_ptr<spdlog::sinks::sink> inner, ProgressLine* line)
      : inner_(std::move(inner)), line_(line) {}

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    if (!inner_->should_log(msg.level)) return;
    line_->Interrupt([&] {
      inner_->log(msg);
      inner_->flush();  // before the live line is drawn again on the same terminal
    });
  }
  void flush_() override { inner_->flush(); }
  void set_pattern_(const std::string& pattern) override { inner_->set_pattern(pattern); }
  void set_formatter_(std::unique_ptr<spdlog::formatter> formatter) override {
    inner_->set_formatter(std::move(formatter));
  }

 private:
  const std::shared_ptr<spdlog::sinks::sink> inner_;
  ProgressLine* const line_;
};

}  // namespace

struct LogAboveProgressLine::Swap {
  std::shared_ptr<spdlog::sinks::dist_sink_mt> dist;
  std::vector<std::shared_ptr<spdlog::sinks::sink>> original;
};

LogAboveProgressLine::LogAboveProgressLine(ProgressLine* line) {
  std::shared_ptr<spdlog::logger> logger = spdlog::default_logger();
  if (logger == nullptr || logger->sinks().size() != 1) return;
  auto dist = std::dynamic_pointer_cast<spdlog::sinks::dist_sink_mt>(logger->sinks().front());
  if (dist == nullptr) return;
  swap_ = std::make_unique<Swap>();
  swap_->dist = dist;
  // Only this class changes the list, and InitLogging filled it before any
  // other thread ran: reading it here races with nothing.
  swap_->original = dist->sinks();
  std::vector<std::shared_ptr<spdlog::sinks::sink>> wrapped;
  for (const auto& sink : swap_->original) {
    wrapped.push_back(std::make_shared<AroundLiveLineSink>(sink, line));
  }
  dist->set_sinks(std::move(wrapped));
}

LogAboveProgressLine::~LogAboveProgressLine() {
  if (swap_ != nullptr) swap_->dist->set_sinks(swap_->original);
}

}  // namespace pst::common
