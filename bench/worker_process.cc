#include "bench/worker_process.h"

#include <cstdio>
#include <exception>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "bench/dense_ops.h"
#include "bench/message_channel.h"
#include "bench/proc_stats.h"
#include "client/grpc_ps_transport.h"
#include "common/status_macros.h"
#include "rpc/grpc_channel.h"

namespace pst::bench {
namespace {

using nlohmann::json;

class WorkerProcess {
 public:
  absl::Status Setup(const json& m) {
    std::string bytes;
    if (!absl::Base64Unescape(m.at("plan").get<std::string>(), &bytes) ||
        !plan_.ParseFromString(bytes)) {
      return absl::InvalidArgumentError("setup: the plan does not parse");
    }
    index_ = m.at("index").get<int>();
    incarnation_ = m.at("incarnation").get<uint64_t>();
    rpc::RpcSettings settings;
    settings.dense_bdp_probe = m.at("bdp_probe").get<bool>();
    transport_ = client::MakeGrpcPsTransport(
        m.at("addresses").get<std::vector<std::string>>(), settings,
        absl::Seconds(m.at("rpc_timeout_s").get<double>()));
    return absl::OkStatus();
  }

  absl::Status Prepare(const json& m) {
    if (transport_ == nullptr) return absl::FailedPreconditionError("prepare before setup");
    const std::string op = m.at("op").get<std::string>();
    const int64_t size = m.at("size").get<int64_t>();
    const std::string wire = m.at("wire").get<std::string>();
    Dense& dense = dense_[{size, wire}];
    if (dense.client == nullptr) {
      PST_ASSIGN_OR_RETURN(dense.client,
                           MakeDenseClient(plan_, size, wire, transport_, index_, incarnation_));
      dense.grads = DenseGradients(size);
    }
    op_ = MakeDenseOp(op, dense.client.get(), size, &step_, &dense.grads, &dense.values);
    return op_().status();
  }

  absl::StatusOr<json> Run(const json& m) {
    if (!op_) return absl::FailedPreconditionError("run before prepare");
    const absl::Time deadline = absl::Now() + absl::Seconds(m.at("budget_s").get<double>());
    const int min_iters = m.at("min_iters").get<int>();
    std::vector<double> latencies;
    double bytes = 0;
    const double cpu0 = SelfCpuSeconds();
    for (int i = 0; i < min_iters || absl::Now() < deadline; ++i) {
      const absl::Time t0 = absl::Now();
      PST_ASSIGN_OR_RETURN(const double moved, op_());
      latencies.push_back(absl::ToDoubleMilliseconds(absl::Now() - t0));
      bytes += moved;
    }
    return json{{"latencies_ms", latencies}, {"bytes", bytes}, {"cpu_s", SelfCpuSeconds() - cpu0}};
  }

 private:
  // One dense variable's client in one wire setting, and its buffers.
  struct Dense {
    std::unique_ptr<client::PsClient> client;
    client::Values grads;
    client::Values values;
  };
  proto::PlacementPlan plan_;
  int index_ = 0;
  uint64_t incarnation_ = 0;
  std::shared_ptr<common::PsTransport> transport_;
  std::map<std::pair<int64_t, std::string>, Dense> dense_;
  int64_t step_ = 0;
  Op op_;
};

}  // namespace

int RunWorkerProcess(int fd) {
  MessageChannel channel(fd);
  WorkerProcess worker;
  for (;;) {
    absl::StatusOr<json> message = channel.Receive(absl::InfiniteDuration());
    if (!message.ok()) {
      if (absl::IsUnavailable(message.status())) return 0;  // the parent is done
      std::fprintf(stderr, "worker process: %s\n", std::string(message.status().message()).c_str());
      return 1;
    }
    json answer = json::object();
    try {
      const std::string cmd = message->value("cmd", "");
      absl::Status status;
      if (cmd == "quit") return 0;
      if (cmd == "setup") {
        status = worker.Setup(*message);
      } else if (cmd == "prepare") {
        status = worker.Prepare(*message);
      } else if (cmd == "run") {
        absl::StatusOr<json> ran = worker.Run(*message);
        if (ran.ok()) answer = *std::move(ran);
        status = ran.status();
      } else {
        status = absl::InvalidArgumentError(absl::StrCat("unknown message '", cmd, "'"));
      }
      if (!status.ok()) {
        answer = {{"error", absl::StrCat(absl::StatusCodeToString(status.code()), ": ",
                                         status.message())}};
      }
    } catch (const std::exception& e) {  // a message without a field it needs
      answer = {{"error", absl::StrCat("bad message: ", e.what())}};
    }
    if (!channel.Send(answer).ok()) return 1;
  }
}

}  // namespace pst::bench
