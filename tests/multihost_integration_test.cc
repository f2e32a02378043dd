// Several "hosts" on one machine: every daemon runs in a network namespace
// of its own, with its own address on a bridge, as on separate machines
// joined by a switch. The job must finish while one ps's link is down for
// a few seconds and one worker's link is capped to a slow rate and drops 1%
// of its packets.
//
// Needs root and iproute2 (ip netns, bridge, tc tbf); skips otherwise. This
// kernel has no netem, so the loss comes from iptables' statistic match
// (inside the worker's namespace); without iptables it is left out, and
// the test says so. Where iptables filters bridged traffic (Docker sets the
// FORWARD policy to DROP), the test lets its own bridge through for its
// duration.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "tests/test_cluster.h"
#include "tools/netns.h"
#include "tools/subprocess.h"

namespace pst::testing {
namespace {

constexpr absl::Duration kTimeout = absl::Seconds(240);
constexpr int kPort = 2222;  // every namespace has its own ports

std::string IptablesPath() {
  for (const char* path : {"/usr/sbin/iptables", "/sbin/iptables"}) {
    if (access(path, X_OK) == 0) return path;
  }
  return "";
}

// OK, or an error with the command, its exit status and what it printed.
absl::Status Shell(const std::string& command) { return tools::RunShell(command).status(); }

// Packets the DROP rules of `listing` (iptables -L -v -x -n) dropped.
int64_t DroppedPackets(const std::string& listing) {
  int64_t total = 0;
  for (absl::string_view line : absl::StrSplit(listing, '\n')) {
    if (!absl::StrContains(line, "DROP") || absl::StrContains(line, "policy")) continue;
    int64_t packets = 0;
    std::vector<absl::string_view> fields = absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (!fields.empty() && absl::SimpleAtoi(fields[0], &packets)) total += packets;
  }
  return total;
}

class MultiHostTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!HaveFashionMnist()) GTEST_SKIP() << "Fashion-MNIST is missing";
    ip_ = tools::IpPath();
    if (geteuid() != 0 || ip_.empty()) GTEST_SKIP() << "needs root and iproute2";
    // A bridge and subnet of this test's own: never those of an earlier test
    // in this process, whose links may still be going away.
    const int sequence = tools::NextNetSequence();
    const int pid = static_cast<int>(getpid());
    subnet_ = absl::StrCat("10.", 100 + pid % 100, ".", (pid / 100 + sequence) % 250);
    const std::string bridge = tools::InterfaceName("pm", 'r', sequence);
    absl::Status made = Shell(absl::StrCat(ip_, " link add ", bridge, " type bridge"));
    if (!made.ok()) GTEST_SKIP() << "cannot create a bridge here: " << made;
    bridge_ = bridge;
    for (const std::string& command :
         {absl::StrCat(ip_, " addr add ", subnet_, ".1/24 dev ", bridge_),
          absl::StrCat(ip_, " link set ", bridge_, " up")}) {
      ASSERT_EQ(Shell(command), absl::OkStatus());
    }
    iptables_ = IptablesPath();
    if (!iptables_.empty()) {
      forward_rule_ = absl::StrCat("FORWARD -i ", bridge_, " -o ", bridge_, " -j ACCEPT");
      const absl::Status inserted = Shell(absl::StrCat(iptables_, " -I ", forward_rule_));
      if (!inserted.ok()) {
        std::printf("bridged traffic left to the FORWARD policy: %s\n",
                    inserted.ToString().c_str());
        forward_rule_.clear();
      }
    }
    dir_ = TestDir();
  }

  void TearDown() override {
    processes_.clear();  // kills what still runs
    // Each host's veth first (synchronous), then its namespace.
    for (Host& host : hosts_) EXPECT_EQ(host.link->Remove(), absl::OkStatus());
    hosts_.clear();
    if (!bridge_.empty()) {
      EXPECT_EQ(Shell(absl::StrCat(ip_, " link del ", bridge_)), absl::OkStatus());
    }
    if (!forward_rule_.empty()) {
      EXPECT_EQ(Shell(absl::StrCat(iptables_, " -D ", forward_rule_)), absl::OkStatus());
    }
  }

  struct Host {
    std::unique_ptr<tools::VethNamespace> link;  // host_veth(): the bridge's end
    std::string address;
  };

  // A namespace with one link to the bridge, at subnet.(10 + index).
  // nullptr (and a failure) when it cannot be made.
  const Host* AddHost(int index) {
    absl::StatusOr<std::unique_ptr<tools::VethNamespace>> link = tools::VethNamespace::Create("pm");
    EXPECT_TRUE(link.ok()) << link.status();
    if (!link.ok()) return nullptr;
    Host& host = hosts_.emplace_back();
    host.link = *std::move(link);
    host.address = absl::StrCat(subnet_, ".", 10 + index);
    const tools::VethNamespace& ns = *host.link;
    EXPECT_EQ(Shell(absl::StrCat(ip_, " link set ", ns.host_veth(), " master ", bridge_)),
              absl::OkStatus());
    EXPECT_EQ(
        ns.Run(absl::StrCat(ip_, " addr add ", host.address, "/24 dev ", ns.inner_veth())).status(),
        absl::OkStatus());
    return &host;
  }

  TestProcess* StartIn(const Host& host, const std::string& binary, const std::string& tf_config,
                       std::vector<std::string> flags) {
    std::vector<std::string> argv = host.link->Wrap({BinaryPath(binary)});
    argv.insert(argv.end(), flags.begin(), flags.end());
    auto process = TestProcess::Start(argv, {"TF_CONFIG=" + tf_config});
    EXPECT_TRUE(process.ok()) << process.status();
    if (!process.ok()) return nullptr;
    processes_.push_back(*std::move(process));
    return processes_.back().get();
  }

  std::string ip_, bridge_, subnet_, dir_;  // bridge_: empty until made
  std::string iptables_, forward_rule_;     // the rule SetUp inserted, if any
  std::deque<Host> hosts_;                  // stable references
  std::vector<std::unique_ptr<TestProcess>> processes_;
};

TEST_F(MultiHostTest, PsLinkDownForSeconds_AndASlowWorkerLink_TheJobStillFinishes) {
  // chief, ps:0, ps:1, worker:0, worker:1: one host each.
  const Host* hosts[5];
  for (int i = 0; i < 5; ++i) {
    hosts[i] = AddHost(i);
    ASSERT_NE(hosts[i], nullptr);
  }
  ASSERT_FALSE(HasFailure());
  const Host& chief = *hosts[0];
  const Host& ps0 = *hosts[1];
  const Host& ps1 = *hosts[2];
  const Host& w0 = *hosts[3];
  const Host& w1 = *hosts[4];
  auto at = [](const Host& h) { return absl::StrCat("\"", h.address, ":", kPort, "\""); };
  const std::string cluster =
      absl::StrCat(R"({"cluster": {"chief": [)", at(chief), R"(], "ps": [)", at(ps0), ",", at(ps1),
                   R"(], "worker": [)", at(w0), ",", at(w1), "]}, ");
  auto config = [&](const char* type, int index) {
    return absl::StrCat(cluster, R"("task": {"type": ")", type, R"(", "index": )", index, "}}");
  };
  // worker:1's link: 400 Mbit/s each way (tc tbf at both ends).
  const std::string shape = " root tbf rate 400mbit burst 1mb latency 200ms";
  ASSERT_EQ(Shell(absl::StrCat("tc qdisc add dev ", w1.link->host_veth(), shape)),
            absl::OkStatus());
  ASSERT_EQ(w1.link->Run(absl::StrCat("tc qdisc add dev ", w1.link->inner_veth(), shape)).status(),
            absl::OkStatus());
  // ... and 1% of its packets dropped each way.
  if (iptables_.empty()) {
    std::printf("no iptables: worker:1's link loses no packets\n");
  } else {
    for (const char* chain : {"INPUT", "OUTPUT"}) {
      ASSERT_EQ(w1.link
                    ->Run(absl::StrCat(iptables_, " -A ", chain,
                                       " -m statistic --mode random --probability 0.01 -j DROP"))
                    .status(),
                absl::OkStatus());
    }
  }

  // The chief and every ps share one checkpoint directory, as on a shared
  // volume.
  const std::vector<std::string> common = {"--heartbeat_ms=200", "--startup_timeout_s=60",
                                           "--peer_timeout_s=10", "--recovery_timeout_s=60",
                                           "--checkpoint_dir=" + dir_ + "/ckpt"};
  auto with = [&](std::vector<std::string> extra) {
    extra.insert(extra.end(), common.begin(), common.end());
    return extra;
  };
  TestProcess* p0 = StartIn(ps0, "ps_server", config("ps", 0), with({}));
  TestProcess* p1 = StartIn(ps1, "ps_server", config("ps", 1), with({}));
  TestProcess* c =
      StartIn(chief, "chief", config("chief", 0),
              with({"--epochs=1", "--log_every_s=1", "--save_checkpoints_steps=100", "--summary_json=" + dir_ + "/summary.json"}));
  TestProcess* k0 = StartIn(w0, "worker", config("worker", 0), with({}));
  TestProcess* k1 = StartIn(w1, "worker", config("worker", 1), with({}));
  ASSERT_TRUE(p0 && p1 && c && k0 && k1);

  // Once training is under way, ps:1's link goes down for 3 s (under the
  // 10 s peer timeout: a stall, not a loss).
  ASSERT_TRUE(c->WaitForOutput("saved checkpoint", kTimeout)) << c->output();
  ASSERT_EQ(Shell(absl::StrCat(ip_, " link set ", ps1.link->host_veth(), " down")),
            absl::OkStatus());
  const absl::Time cut = absl::Now();
  absl::SleepFor(absl::Seconds(3));  // the outage itself, not a wait for a condition
  ASSERT_EQ(Shell(absl::StrCat(ip_, " link set ", ps1.link->host_veth(), " up")), absl::OkStatus());
  std::printf("ps:1 cut off for %.1f s\n", absl::ToDoubleSeconds(absl::Now() - cut));

  for (TestProcess* p : {c, k0, k1, p0, p1}) {
    std::optional<int> exited = p->WaitForExit(kTimeout);
    ASSERT_TRUE(exited.has_value()) << p->output();
    EXPECT_EQ(ExitCode(*exited), 0) << p->output();
  }
  const nlohmann::json summary = ReadJsonFile(dir_ + "/summary.json");
  ASSERT_TRUE(summary.is_object()) << c->output();
  std::printf("test accuracy %.4f, %s\n", summary["test_accuracy"].get<double>(),
              summary.dump().substr(0, 200).c_str());
  EXPECT_GE(summary["test_accuracy"].get<double>(), 0.80) << c->output();
  EXPECT_EQ(summary["global_step"], 2 * ((30000 + 63) / 64)) << "every batch of both workers";
  if (!iptables_.empty()) {
    absl::StatusOr<std::string> listing = w1.link->Run(iptables_ + " -L -v -x -n");
    ASSERT_TRUE(listing.ok()) << listing.status();
    const int64_t dropped = DroppedPackets(*listing);
    std::printf("worker:1's link dropped %lld packets\n", static_cast<long long>(dropped));
    EXPECT_GT(dropped, 0) << "the loss was injected";
  }
}

}  // namespace
}  // namespace pst::testing
