// `pstrain local`: a whole cluster on this machine, one process per task.
//
// Generates a TF_CONFIG with free loopback ports, starts every ps, the chief
// and every worker as its own process, streams their logs with a "task |"
// prefix, and waits. With progress kTty the coordinator's progress lines
// become one live line at the bottom of the terminal, below everything
// else, instead of scrolling by among the daemons' logs. When any daemon fails, or on
// Ctrl-C/SIGTERM or the timeout, every remaining daemon gets SIGTERM, then SIGKILL after a grace
// period. Children carry PR_SET_PDEATHSIG, so even a SIGKILLed launcher
// leaves no daemon behind. With restart_failed, a daemon killed by a signal
// is started again instead.
#ifndef PST_TOOLS_LOCAL_CLUSTER_H_
#define PST_TOOLS_LOCAL_CLUSTER_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/process.h"
#include "common/progress.h"
#include "common/tf_config.h"

namespace pst::tools {

struct LocalClusterOptions {
  int num_ps = 2;
  int num_workers = 2;
  bool with_chief = true;  // false: worker 0 acts as chief
  std::string host = "127.0.0.1";
  std::string bin_dir;  // where ps_server, worker, chief live
  // Passed to every daemon, "{task}" replaced by its task ("ps-0",
  // "worker-1"): --tls_cert=certs/{task}.pem gives each its own.
  std::vector<std::string> daemon_flags;
  std::string summary_json;  // passed to the coordinator task
  int metrics_port = 0;      // > 0: daemon k (in start order) serves /metrics on metrics_port + k
  // Non-empty: every worker runs this shell command (`/bin/sh -c`) instead
  // of the C++ worker binary, e.g. "/usr/bin/python3 examples/train.py":
  // a Python worker (import pstrain) with its TF_CONFIG, PYTHONPATH naming
  // the build tree's package (bin_dir/../python) when there is one, and
  // PSTRAIN_BIN=bin_dir, and PSTRAIN_TLS_CERT, _TLS_KEY, _TLS_CA,
  // _AUTH_TOKEN_FILE and _TLS_SERVER_NAME from the daemon flags ("{task}"
  // replaced; pstrain.Worker applies them). It gets no daemon flags; it is
  // supervised as any worker (restart_failed included). Needs with_chief.
  std::string worker_command;
  // An evaluator task (TF_CONFIG's "evaluator", started last): the
  // evaluator binary, given the daemon flags (the built-in models), or with
  // evaluator_command this shell command, as worker_command is run, with
  // PSTRAIN_CHECKPOINT_DIR, PSTRAIN_SUMMARY_DIR, PSTRAIN_DATA_DIR,
  // PSTRAIN_BEST_METRIC and PSTRAIN_BEST_MODE taken from the daemon flags
  // (a Python evaluator: pstrain.Evaluator.from_env()).
  bool with_evaluator = false;
  std::string evaluator_command;
  int slow_worker = -1;  // this worker gets --step_delay_ms
  int slow_worker_delay_ms = 0;
  // Non-empty (a tc rate such as "1gbit"): each ps runs in a network
  // namespace of its own behind a link of this rate each way
  // (tools/shaped_link.h; root and iproute2), as on a machine with that
  // NIC; the chief and workers stay here. With --ps_replicas=2 among the
  // daemon flags the ps reach one another through this machine, which then
  // forwards between their links (an iptables rule per link).
  std::string ps_link_rate;
  absl::Duration timeout = absl::ZeroDuration();  // zero: none
  absl::Duration grace = absl::Seconds(10);       // SIGTERM -> SIGKILL
  // Restart a daemon killed by a signal (kill -9, a crash, the OOM killer)
  // with the same task, at most max_restarts times each, as a supervisor
  // with restart-on-failure would. A daemon that exits with an error code
  // has given its own verdict and is not restarted. Once the chief has
  // ended the job (exited with success) nothing is restarted, and daemons
  // still running `grace` later are stopped.
  bool restart_failed = false;
  int max_restarts = 3;
  // How the job's progress is shown on stdout (kAuto is decided here, from
  // whether stdout is a terminal). kTty: the coordinator logs plain
  // progress lines, and they are drawn as the live line; kPlain: they are
  // printed like any other line; kOff: the coordinator shows none.
  common::ProgressMode progress = common::ProgressMode::kAuto;
  // kTty: the coordinator's --log_every_s, so the live line moves often
  // (0: the forwarded --log_every_s stands).
  double live_log_every_s = 0;
};

// What RunLocalCluster refuses before starting anything: --ps or --workers
// below 1, --worker_command or --evaluator_command without a chief, a
// --ps_link_rate that is not a tc rate. InvalidArgument naming the flag.
absl::Status CheckLocalClusterOptions(const LocalClusterOptions& options);

// The shape of the cluster RunLocalCluster starts (its addresses are
// placeholders: the ports are picked when it starts), with the
// coordinator's task: for the checks that need only the shape
// (flags/start_checks.h).
common::TfConfig LocalClusterShape(const LocalClusterOptions& options);

// Runs the cluster until every daemon has exited. Stopping `stop` from
// outside (the launcher's signal handler) tears the cluster down; the
// launcher also stops it itself when a daemon fails or the timeout passes.
// Returns the launcher's exit code: 0 when every daemon exited 0; 1 when one
// failed or the timeout passed; 130 when stopped from outside (Ctrl-C); 2
// for a setup error. The last line printed says how the job ended; a failed
// job's repeats why: "pstrain local: job failed: worker:0: <the first error
// line that task logged, else its last line>", or the timeout.
int RunLocalCluster(const LocalClusterOptions& options, common::StopSignal* stop);

}  // namespace pst::tools

#endif  // PST_TOOLS_LOCAL_CLUSTER_H_
