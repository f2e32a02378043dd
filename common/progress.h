// A job's progress, as one line: formatted ("step 1789/5625 | epoch 2/3 |
// loss 0.3919 | 7545 examples/s | ETA 1m23s | workers 0/2 done"), parsed
// back (the launcher reads the chief's log lines), and rendered either as a
// live line rewritten in place on a terminal or as plain periodic lines.
#ifndef PST_COMMON_PROGRESS_H_
#define PST_COMMON_PROGRESS_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace pst::common {

// How a process shows progress (--progress).
enum class ProgressMode {
  kAuto,   // kTty when the output is a terminal, else kPlain
  kTty,    // one live line, rewritten in place
  kPlain,  // a log line every interval
  kOff,    // nothing
};

// "auto", "tty", "plain" or "off". Errors: InvalidArgument for anything else.
absl::StatusOr<ProgressMode> ParseProgressMode(absl::string_view text);

// For absl flags of type ProgressMode (--progress=tty).
bool AbslParseFlag(absl::string_view text, ProgressMode* mode, std::string* error);
std::string AbslUnparseFlag(ProgressMode mode);

// `mode` with kAuto decided: kTty when `fd` is a terminal, else kPlain.
ProgressMode ResolveProgressMode(ProgressMode mode, int fd);

// The width of the terminal on `fd` (TIOCGWINSZ); 80 when it is not one or
// does not say.
int TerminalWidth(int fd);

// What one progress report says.
struct Progress {
  int64_t step = 0;
  int64_t total_steps = 0;  // 0: unknown, and then no ETA is shown
  int epoch = 0;            // 1-based
  int total_epochs = 0;     // 0: unknown
  double loss = 0;
  double examples_per_sec = 0;
  // The learning rate of the next update, shown when the job has a
  // schedule ("lr 7.00e-04"); 0: no field.
  double learning_rate = 0;
  std::optional<absl::Duration> eta;  // empty: not known yet ("ETA ?")
  int workers_done = 0;
  int workers = 0;
  // Hash tables: rows, evictions and the disk tier ("tables 31.2k rows,
  // 1.50k evicted/s", chief/table_view.h); empty: no field.
  std::string tables;
  // Replicated jobs: how the shards' backups stand ("backups 2/2 in sync");
  // empty: no field.
  std::string replicas;
};

// "45s", "1m23s", "2h05m"; negative durations count as zero.
std::string FormatEta(absl::Duration eta);

// The line for `progress`, without a trailing newline. The ETA field is
// there only when total_steps is known.
std::string FormatProgress(const Progress& progress);

// The progress in a line FormatProgress wrote, found anywhere in `line` (so
// a log line with its time and task prefix parses). Empty for any other
// line. Numbers come back at the precision they were printed with.
std::optional<Progress> ParseProgress(absl::string_view line);

// Estimates the time left from the step rate, measured from the first move
// of the step (so the time spent starting up does not count) and measured
// afresh when the step goes back (a restore). Not thread-safe.
class EtaEstimator {
 public:
  // The time left to reach `total` from `step` at `now`. Empty when total
  // is unknown (<= 0) or the step has not advanced twice yet.
  std::optional<absl::Duration> Update(int64_t step, int64_t total, absl::Time now);

 private:
  bool started_ = false;
  bool moving_ = false;      // the step has moved since started (or reset)
  int64_t origin_step_ = 0;  // where the rate is measured from
  absl::Time origin_time_;
  int64_t last_step_ = 0;
};

// Renders progress text. On a terminal it keeps one live line: each Update
// rewrites it in place ('\r', then the text cut to one column less than the
// terminal's width, at a " | " field separator where there is one, then
// ESC[K to erase what a longer earlier text left); other output is printed
// above it (Print, Interrupt), and Finish ends it with a newline. Elsewhere
// Update emits a plain line at most once per interval and Print writes its
// line as it is.
//
// All output goes through the injected functions (ForFd makes them write to
// a file descriptor), so tests capture it and control the clock.
//
// Thread-safe: every method may be called from any thread. `write` and
// `width` are called with an internal mutex held; `emit_plain` without it
// (it may log).
class ProgressLine {
 public:
  struct Options {
    bool terminal = false;
    // Writes raw text (no newline added).
    std::function<void(absl::string_view)> write;
    // Plain mode: emits one progress line. Default: write(text + "\n").
    std::function<void(const std::string&)> emit_plain;
    // Terminal mode: the columns available, asked at every redraw so a
    // resized terminal is followed. Default: 80.
    std::function<int()> width;
    absl::Duration plain_interval = absl::Seconds(5);
    std::function<absl::Time()> clock = [] { return absl::Now(); };
  };

  // Writes to `fd` (terminal mode when it is a terminal, with its width)
  // with write(2); plain lines are written there too.
  static std::unique_ptr<ProgressLine> ForFd(int fd, bool terminal, absl::Duration plain_interval);

  explicit ProgressLine(Options options);
  ~ProgressLine();  // calls Finish
  ProgressLine(const ProgressLine&) = delete;
  ProgressLine& operator=(const ProgressLine&) = delete;

  bool terminal() const { return options_.terminal; }

  // Shows `text`: redraws the live line, or (plain) emits it when an
  // interval has passed since the last plain line, or since construction
  // for the first one.
  void Update(const std::string& text);

  // Writes `line` and a newline above the live line.
  void Print(absl::string_view line);

  // Runs `output` with the live line erased, then draws it again: for
  // output that goes to the same terminal by other means (a logger).
  void Interrupt(const std::function<void()>& output);

  // Ends the live line with a newline, leaving its last text on screen.
  // Later Updates start a new one.
  void Finish();

  // Shows `text` whatever the interval (the final figures, which a plain
  // log should not miss either), then Finish.
  void Finish(const std::string& text);

 private:
  void Show(const std::string& text, bool force) ABSL_LOCKS_EXCLUDED(mu_);
  void Draw() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Erase() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Options options_;
  absl::Mutex mu_;
  std::string text_ ABSL_GUARDED_BY(mu_);    // the live line's text
  bool drawn_ ABSL_GUARDED_BY(mu_) = false;  // the live line is on screen
  absl::Time next_plain_ ABSL_GUARDED_BY(mu_);
};

// While it lives, every message of spdlog's default logger is written with
// `line`'s live line erased and drawn again after it (ProgressLine::
// Interrupt), so log lines and the live line do not run into each other.
// Works with the logger InitLogging (common/logging.h) sets up; with any
// other it does nothing. REQUIRES: `line` outlives this object.
class LogAboveProgressLine {
 public:
  explicit LogAboveProgressLine(ProgressLine* line);
  ~LogAboveProgressLine();
  LogAboveProgressLine(const LogAboveProgressLine&) = delete;
  LogAboveProgressLine& operator=(const LogAboveProgressLine&) = delete;

 private:
  struct Swap;
  std::unique_ptr<Swap> swap_;
};

}  // namespace pst::common

#endif  // PST_COMMON_PROGRESS_H_
