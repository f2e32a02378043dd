// The ps daemon's life as a library call: serve a store over gRPC at this
// task's address until the chief says the job is done or a signal stops
// it. cmd/ps_server.cc turns flags into PsDaemonOptions and calls RunPs.
#ifndef PST_PS_SERVER_RUN_PS_H_
#define PST_PS_SERVER_RUN_PS_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/metrics.h"
#include "common/process.h"
#include "common/tf_config.h"
#include "ps_server/store/variable_store.h"
#include "rpc/grpc_channel.h"

namespace pst::ps {

struct PsDaemonOptions {
  common::TfConfig tf;  // task type "ps"
  uint64_t incarnation = 0;
  VariableStore::Options store;
  // Longest a pull may wait for a version or clock (--max_park_s).
  absl::Duration max_park = absl::Seconds(600);
  // Replicated jobs: longest a forwarded change may go unanswered, and how
  // long a link to a peer may take to come up.
  absl::Duration replica_timeout = absl::Seconds(10);
  absl::Duration replica_connect_timeout = absl::Seconds(60);
  // Give up when the chief has been silent this long (zero: never).
  absl::Duration chief_timeout = absl::Seconds(300);
  std::string checkpoint_dir;  // created if missing; empty: saves are refused
  std::string bind;            // listen here instead of the TF_CONFIG port's host
  // The server's and the replica links' gRPC settings (security, limits,
  // the BDP probe).
  rpc::RpcSettings rpc;
  // Fault injection for tests: every save waits this long between its
  // snapshot and its file (PsNode::Options::save_delay).
  absl::Duration save_delay = absl::ZeroDuration();
  // The store's gauges go here (null: no exporter). RunPs owns it, so that
  // no scrape outlives the store it reads.
  std::unique_ptr<common::MetricsExporter> metrics;
};

// Serves until `stop` fires. Errors: the server cannot start, the
// checkpoint folder cannot be made, or the chief went silent past
// chief_timeout (the daemon then exits nonzero).
absl::Status RunPs(PsDaemonOptions options, common::StopSignal& stop);

}  // namespace pst::ps

#endif  // PST_PS_SERVER_RUN_PS_H_
