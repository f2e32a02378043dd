#include "common/progress.h"

#include <fcntl.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace pst::common {
namespace {

constexpr char kErase[] = "\x1b[K";

Progress Sample() {
  Progress p;
  p.step = 1789;
  p.total_steps = 5625;
  p.epoch = 2;
  p.total_epochs = 3;
  p.loss = 0.39187;
  p.examples_per_sec = 7545.4;
  p.eta = absl::Seconds(83);
  p.workers_done = 0;
  p.workers = 2;
  return p;
}

TEST(ProgressModeTest, Parse_KnownNames_Parse) {
  EXPECT_EQ(*ParseProgressMode("auto"), ProgressMode::kAuto);
  EXPECT_EQ(*ParseProgressMode("tty"), ProgressMode::kTty);
  EXPECT_EQ(*ParseProgressMode("plain"), ProgressMode::kPlain);
  EXPECT_EQ(*ParseProgressMode("off"), ProgressMode::kOff);
  EXPECT_EQ(ParseProgressMode("yes").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ProgressModeTest, FlagParse_RoundTrips) {
  for (ProgressMode mode :
       {ProgressMode::kAuto, ProgressMode::kTty, ProgressMode::kPlain, ProgressMode::kOff}) {
    ProgressMode parsed = ProgressMode::kAuto;
    std::string error;
    EXPECT_TRUE(AbslParseFlag(AbslUnparseFlag(mode), &parsed, &error)) << error;
    EXPECT_EQ(parsed, mode);
  }
  ProgressMode parsed = ProgressMode::kAuto;
  std::string error;
  EXPECT_FALSE(AbslParseFlag("colour", &parsed, &error));
  EXPECT_NE(error.find("auto, tty, plain or off"), std::string::npos) << error;
}

TEST(ProgressModeTest, Resolve_AutoOnPipe_IsPlain) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  EXPECT_EQ(ResolveProgressMode(ProgressMode::kAuto, fds[1]), ProgressMode::kPlain);
  EXPECT_EQ(ResolveProgressMode(ProgressMode::kTty, fds[1]), ProgressMode::kTty);
  EXPECT_EQ(ResolveProgressMode(ProgressMode::kOff, fds[1]), ProgressMode::kOff);
  // Not a terminal: the default width.
  EXPECT_EQ(TerminalWidth(fds[1]), 80);
  close(fds[0]);
  close(fds[1]);
}

TEST(FormatEtaTest, Format_Ranges_ReadAsMinutesAndSeconds) {
  EXPECT_EQ(FormatEta(absl::ZeroDuration()), "0s");
  EXPECT_EQ(FormatEta(absl::Seconds(-5)), "0s");
  EXPECT_EQ(FormatEta(absl::Milliseconds(44600)), "45s");
  EXPECT_EQ(FormatEta(absl::Seconds(59)), "59s");
  EXPECT_EQ(FormatEta(absl::Seconds(60)), "1m00s");
  EXPECT_EQ(FormatEta(absl::Seconds(83)), "1m23s");
  EXPECT_EQ(FormatEta(absl::Seconds(3599)), "59m59s");
  EXPECT_EQ(FormatEta(absl::Seconds(3600)), "1h00m");
  EXPECT_EQ(FormatEta(absl::Hours(2) + absl::Minutes(5) + absl::Seconds(40)), "2h06m");
  EXPECT_EQ(FormatEta(absl::Hours(30)), "30h00m");
}

TEST(FormatProgressTest, Format_TotalKnown_ShowsTotalsAndEta) {
  EXPECT_EQ(FormatProgress(Sample()),
            "step 1789/5625 | epoch 2/3 | loss 0.3919 | 7545 examples/s | ETA 1m23s | "
            "workers 0/2 done");
}

TEST(FormatProgressTest, Format_EtaNotYetKnown_ShowsQuestionMark) {
  Progress p = Sample();
  p.eta.reset();
  EXPECT_EQ(FormatProgress(p),
            "step 1789/5625 | epoch 2/3 | loss 0.3919 | 7545 examples/s | ETA ? | "
            "workers 0/2 done");
}

TEST(FormatProgressTest, Format_TotalUnknown_ShowsNoEta) {
  Progress p = Sample();
  p.total_steps = 0;
  p.total_epochs = 0;
  EXPECT_EQ(FormatProgress(p),
            "step 1789 | epoch 2 | loss 0.3919 | 7545 examples/s | workers 0/2 done");
}

TEST(FormatProgressTest, Format_Replicated_EndsWithTheBackups) {
  Progress p = Sample();
  p.replicas = "backups 1/2 in sync";
  const std::string line = FormatProgress(p);
  EXPECT_EQ(line,
            "step 1789/5625 | epoch 2/3 | loss 0.3919 | 7545 examples/s | ETA 1m23s | "
            "workers 0/2 done | backups 1/2 in sync");
  const std::optional<Progress> parsed = ParseProgress(line);
  ASSERT_TRUE(parsed.has_value());
  EXPECT_EQ(parsed->replicas, "backups 1/2 in sync");
  EXPECT_EQ(parsed->workers, 2);
}

TEST(FormatProgressTest, Format_Tables_BeforeTheBackups_AndParsesBack) {
  Progress p = Sample();
  p.tables = "tables 2.00k rows, 500 evicted/s, 12.0k on disk, 125 reads/s, 500 writes/s";
  p.replicas = "backups 2/2 in sync";
  const std::string line = FormatProgress(p);
  EXPECT_EQ(line,
            "step 1789/5625 | epoch 2/3 | loss 0.3919 | 7545 examples/s | ETA 1m23s | "
            "workers 0/2 done | tables 2.00k rows, 500 evicted/s, 12.0k on disk, 125 reads/s, "
            "500 writes/s | backups 2/2 in sync");
  const std::optional<Progress> parsed = ParseProgress(line);
  ASSERT_TRUE(parsed.has_value());
  EXPECT_EQ(parsed->tables, p.tables);
  EXPECT_EQ(parsed->replicas, p.replicas);
  p.replicas.clear();
  const std::optional<Progress> alone = ParseProgress(FormatProgress(p));
  ASSERT_TRUE(alone.has_value());
  EXPECT_EQ(alone->tables, p.tables);
}

TEST(FormatProgressTest, Format_ScheduledRate_AfterTheWorkers_AndParsesBack) {
  Progress p = Sample();
  p.learning_rate = 0.00049;
  p.tables = "tables 2.00k rows";
  const std::string line = FormatProgress(p);
  EXPECT_EQ(line,
            "step 1789/5625 | epoch 2/3 | loss 0.3919 | 7545 examples/s | ETA 1m23s | "
            "workers 0/2 done | lr 4.90e-04 | tables 2.00k rows");
  const std::optional<Progress> parsed = ParseProgress(line);
  ASSERT_TRUE(parsed.has_value());
  EXPECT_DOUBLE_EQ(parsed->learning_rate, 0.00049);
  EXPECT_EQ(parsed->tables, p.tables);
  p.learning_rate = 0;  // no schedule: no field
  EXPECT_EQ(FormatProgress(p).find("lr "), std::string::npos);
}

TEST(ParseProgressTest, Parse_LogLine_RoundTrips) {
  const Progress want = Sample();
  std::optional<Progress> got = ParseProgress("20:06:46.123 I chief:0] " + FormatProgress(want));
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->step, 1789);
  EXPECT_EQ(got->total_steps, 5625);
  EXPECT_EQ(got->epoch, 2);
  EXPECT_EQ(got->total_epochs, 3);
  EXPECT_DOUBLE_EQ(got->loss, 0.3919);
  EXPECT_DOUBLE_EQ(got->examples_per_sec, 7545);
  ASSERT_TRUE(got->eta.has_value());
  EXPECT_EQ(*got->eta, absl::Seconds(83));
  EXPECT_EQ(got->workers_done, 0);
  EXPECT_EQ(got->workers, 2);
  // Formatting what was parsed gives the same line.
  EXPECT_EQ(FormatProgress(*got), FormatProgress(want));
}

TEST(ParseProgressTest, Parse_EveryVariant_RoundTrips) {
  std::vector<Progress> cases(4, Sample());
  cases[1].eta.reset();
  cases[2].total_steps = 0;
  cases[3].eta = absl::Hours(2) + absl::Minutes(5);
  for (const Progress& p : cases) {
    const std::string line = FormatProgress(p);
    std::optional<Progress> got = ParseProgress(line);
    ASSERT_TRUE(got.has_value()) << line;
    EXPECT_EQ(FormatProgress(*got), line);
  }
}

TEST(ParseProgressTest, Parse_OtherLines_AreNotProgress) {
  EXPECT_FALSE(ParseProgress("I chief:0] mode async").has_value());
  EXPECT_FALSE(ParseProgress("checkpoint at step 12 not saved: gone").has_value());
  EXPECT_FALSE(ParseProgress("step 1 | epoch 1 | loss x | 3 examples/s | workers 0/1 done"));
  EXPECT_FALSE(ParseProgress("step 1/9 | epoch 1 | loss 1 | 3 examples/s | workers 0/1 done"))
      << "a total without an ETA field";
}

TEST(EtaEstimatorTest, Update_SteadyRate_RemainingOverRate) {
  EtaEstimator eta;
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  EXPECT_FALSE(eta.Update(0, 1000, t0).has_value()) << "no rate yet";
  EXPECT_FALSE(eta.Update(100, 1000, t0 + absl::Seconds(10)).has_value()) << "first move";
  // 100 steps in 10 s since the first move: 10 steps/s, 800 left.
  std::optional<absl::Duration> left = eta.Update(200, 1000, t0 + absl::Seconds(20));
  ASSERT_TRUE(left.has_value());
  EXPECT_EQ(*left, absl::Seconds(80));
  EXPECT_EQ(*eta.Update(1000, 1000, t0 + absl::Seconds(100)), absl::ZeroDuration());
}

TEST(EtaEstimatorTest, Update_StartupWait_DoesNotCountInRate) {
  EtaEstimator eta;
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  eta.Update(0, 1000, t0);
  eta.Update(0, 1000, t0 + absl::Seconds(30));  // workers still loading their data
  eta.Update(50, 1000, t0 + absl::Seconds(35));
  EXPECT_EQ(*eta.Update(100, 1000, t0 + absl::Seconds(40)), absl::Seconds(90));
}

TEST(EtaEstimatorTest, Update_JumpSeenRightAfterALook_NotTakenAsTheRate) {
  // Steps come in heartbeat jumps: 300 steps made over a second show up
  // 0.2 s after a look that still saw 0. That is not 1500 steps/s.
  EtaEstimator eta;
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  eta.Update(0, 1000, t0);
  EXPECT_FALSE(eta.Update(300, 1000, t0 + absl::Milliseconds(200)).has_value());
  EXPECT_FALSE(eta.Update(300, 1000, t0 + absl::Milliseconds(400)).has_value());
  // From the jump on: 200 steps in 2 s, 500 left.
  EXPECT_EQ(*eta.Update(500, 1000, t0 + absl::Milliseconds(2200)), absl::Seconds(5));
}

TEST(EtaEstimatorTest, Update_StepGoesBack_MeasuresAgain) {
  EtaEstimator eta;
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  eta.Update(0, 1000, t0);
  eta.Update(100, 1000, t0 + absl::Seconds(1));
  eta.Update(500, 1000, t0 + absl::Seconds(5));
  // Restored to step 400 at t0 + 60 s: the rate starts over from there.
  EXPECT_FALSE(eta.Update(400, 1000, t0 + absl::Seconds(60)).has_value());
  EXPECT_FALSE(eta.Update(460, 1000, t0 + absl::Seconds(66)).has_value());
  EXPECT_EQ(*eta.Update(520, 1000, t0 + absl::Seconds(72)), absl::Seconds(48));
}

TEST(EtaEstimatorTest, Update_TotalUnknown_NoEta) {
  EtaEstimator eta;
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  eta.Update(0, 0, t0);
  EXPECT_FALSE(eta.Update(100, 0, t0 + absl::Seconds(10)).has_value());
}

// A ProgressLine writing into a string, on a clock the test moves.
class ProgressLineTest : public ::testing::Test {
 protected:
  std::unique_ptr<ProgressLine> Make(bool terminal, int width = 80) {
    ProgressLine::Options options;
    options.terminal = terminal;
    options.write = [this](absl::string_view text) { out_.append(text.data(), text.size()); };
    options.width = [width] { return width; };
    options.plain_interval = absl::Seconds(5);
    options.clock = [this] { return now_; };
    return std::make_unique<ProgressLine>(std::move(options));
  }

  std::string out_;
  absl::Time now_ = absl::FromUnixSeconds(1000);
};

TEST_F(ProgressLineTest, Terminal_Update_RewritesOneLineInPlace) {
  auto line = Make(/*terminal=*/true);
  line->Update("step 1 | loss 2.0000");
  line->Update("step 2");
  EXPECT_EQ(out_, std::string("\rstep 1 | loss 2.0000") + kErase + "\rstep 2" + kErase);
  EXPECT_EQ(out_.find('\n'), std::string::npos);
  line->Finish();
  EXPECT_EQ(out_.back(), '\n');
  out_.clear();
  line->Finish();  // nothing drawn any more
  EXPECT_EQ(out_, "");
}

TEST_F(ProgressLineTest, Terminal_LongText_CutToWidthLessOne) {
  auto line = Make(/*terminal=*/true, /*width=*/10);
  line->Update("0123456789abcdef");
  EXPECT_EQ(out_, std::string("\r012345678") + kErase);
}

TEST_F(ProgressLineTest, Terminal_LongFields_CutAtASeparator) {
  auto line = Make(/*terminal=*/true, /*width=*/30);
  line->Update("step 938/938 | epoch 1/1 | loss 0.4058");
  EXPECT_EQ(out_, std::string("\rstep 938/938 | epoch 1/1") + kErase);
}

TEST_F(ProgressLineTest, Terminal_Print_GoesAboveTheLiveLine) {
  auto line = Make(/*terminal=*/true);
  line->Print("before any progress");
  EXPECT_EQ(out_, "before any progress\n");
  out_.clear();
  line->Update("step 7");
  out_.clear();
  line->Print("ps:0 | a log line");
  EXPECT_EQ(out_, std::string("\r") + kErase + "ps:0 | a log line\n\rstep 7" + kErase);
}

TEST_F(ProgressLineTest, Terminal_Interrupt_ErasesAndRedraws) {
  auto line = Make(/*terminal=*/true);
  line->Update("step 7");
  out_.clear();
  line->Interrupt([this] { out_.append("logged\n"); });
  EXPECT_EQ(out_, std::string("\r") + kErase + "logged\n\rstep 7" + kErase);
}

TEST_F(ProgressLineTest, Terminal_Destroyed_EndsTheLine) {
  auto line = Make(/*terminal=*/true);
  line->Update("step 7");
  line.reset();
  EXPECT_EQ(out_, std::string("\rstep 7") + kErase + "\n");
}

TEST_F(ProgressLineTest, Plain_Update_AtMostOneLinePerInterval) {
  auto line = Make(/*terminal=*/false);
  line->Update("step 1");  // the first interval has not passed
  EXPECT_EQ(out_, "");
  now_ += absl::Seconds(5);
  line->Update("step 2");
  line->Update("step 3");  // same moment: dropped
  now_ += absl::Seconds(4);
  line->Update("step 4");  // 4 s later: dropped
  now_ += absl::Seconds(1);
  line->Update("step 5");
  EXPECT_EQ(out_, "step 2\nstep 5\n");
  EXPECT_EQ(out_.find('\r'), std::string::npos);
  EXPECT_EQ(out_.find('\x1b'), std::string::npos);
  line->Print("a log line");
  line.reset();  // nothing to end
  EXPECT_EQ(out_, "step 2\nstep 5\na log line\n");
}

TEST_F(ProgressLineTest, Finish_WithText_ShownWhateverTheInterval) {
  auto plain = Make(/*terminal=*/false);
  plain->Finish("step 9/9");  // within the first interval, still shown
  EXPECT_EQ(out_, "step 9/9\n");
  out_.clear();
  auto live = Make(/*terminal=*/true);
  live->Update("step 8/9");
  live->Finish("step 9/9");
  EXPECT_EQ(out_, std::string("\rstep 8/9") + kErase + "\rstep 9/9" + kErase + "\n");
}

TEST_F(ProgressLineTest, Plain_EmitPlain_ReceivesTheText) {
  std::vector<std::string> emitted;
  ProgressLine::Options options;
  options.terminal = false;
  options.write = [this](absl::string_view text) { out_.append(text.data(), text.size()); };
  options.emit_plain = [&emitted](const std::string& text) { emitted.push_back(text); };
  options.plain_interval = absl::Seconds(5);
  options.clock = [this] { return now_; };
  ProgressLine line(std::move(options));
  now_ += absl::Seconds(5);
  line.Update("step 9");
  EXPECT_EQ(emitted, std::vector<std::string>{"step 9"});
  EXPECT_EQ(out_, "");
}

TEST(ProgressLineFdTest, ForFd_Pipe_WritesPlainLines) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  {
    auto line = ProgressLine::ForFd(fds[1], /*terminal=*/false, absl::ZeroDuration());
    line->Update("step 1 | epoch 1");
  }
  close(fds[1]);
  std::string got;
  char buf[256];
  for (ssize_t n; (n = read(fds[0], buf, sizeof(buf))) > 0;) got.append(buf, n);
  close(fds[0]);
  EXPECT_EQ(got, "step 1 | epoch 1\n");
}

}  // namespace
}  // namespace pst::common
