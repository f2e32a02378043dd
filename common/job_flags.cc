#include "common/job_flags.h"

#include <cmath>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

ABSL_FLAG(std::string, tf_config, "",
          "Cluster spec as TF_CONFIG JSON, or @path to a file holding it. Default: the "
          "TF_CONFIG environment variable.");
ABSL_FLAG(std::string, data_dir, "/usr/share/datasets/fashion-mnist",
          "Directory with the Fashion-MNIST IDX files (Debian's dataset-fashion-mnist).");
ABSL_FLAG(std::string, model, "mlp", "Model to train: mlp.");
ABSL_FLAG(std::string, hidden, "256,128", "Hidden layer widths of the MLP, comma-separated.");
ABSL_FLAG(int32_t, epochs, 3, "Passes over each worker's shard of the training data.");
ABSL_FLAG(int64_t, max_steps, 0,
          "Stop when the global step (pushes applied) reaches this; 0 means no limit.");
ABSL_FLAG(int32_t, batch_size, 64, "Examples per worker step.");
ABSL_FLAG(double, learning_rate, 0.001, "Optimizer learning rate.");
ABSL_FLAG(std::string, optimizer, "adam", "Optimizer run on the ps: sgd, momentum or adam.");
ABSL_FLAG(double, momentum, 0.9, "Momentum coefficient, for --optimizer=momentum.");
ABSL_FLAG(bool, nesterov, false, "Nesterov momentum, for --optimizer=momentum.");
ABSL_FLAG(double, beta1, 0.9, "Adam's first-moment decay, for --optimizer=adam.");
ABSL_FLAG(double, beta2, 0.999, "Adam's second-moment decay, for --optimizer=adam.");
ABSL_FLAG(double, epsilon, 1e-7, "Adam's epsilon, for --optimizer=adam.");
ABSL_FLAG(uint64_t, seed, 1, "Seed for initialization and data shuffling.");
ABSL_FLAG(std::string, summary_json, "",
          "If set, the chief writes the job's final figures to this file as JSON.");
ABSL_FLAG(double, log_every_s, 5, "Seconds between the chief's progress lines.");
ABSL_FLAG(int32_t, heartbeat_ms, 1000, "Milliseconds between heartbeats.");
ABSL_FLAG(double, peer_timeout_s, 60,
          "Seconds without a heartbeat after which a peer is declared dead.");
ABSL_FLAG(double, startup_timeout_s, 120, "Seconds to wait for the cluster's tasks to come up.");
ABSL_FLAG(double, rpc_timeout_s, 60, "Deadline of one Pull or Push RPC, in seconds.");

namespace pst::common {

absl::StatusOr<proto::TrainingConfig> TrainingConfigFromFlags() {
  proto::TrainingConfig config;
  config.set_model(absl::GetFlag(FLAGS_model));
  if (config.model() != "mlp") {
    return absl::InvalidArgumentError(
        absl::StrCat("--model=", config.model(), " is not a known model (known: mlp)"));
  }
  for (absl::string_view part :
       absl::StrSplit(absl::GetFlag(FLAGS_hidden), ',', absl::SkipWhitespace())) {
    int units = 0;
    if (!absl::SimpleAtoi(part, &units) || units < 1 || units > (1 << 20)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--hidden=", absl::GetFlag(FLAGS_hidden),
                       ": each layer width must be an integer in 1..1048576, got '", part, "'"));
    }
    config.add_hidden_units(units);
  }
  config.set_epochs(absl::GetFlag(FLAGS_epochs));
  if (config.epochs() < 1) return absl::InvalidArgumentError("--epochs must be at least 1");
  config.set_max_steps(absl::GetFlag(FLAGS_max_steps));
  if (config.max_steps() < 0) return absl::InvalidArgumentError("--max_steps must be >= 0");
  config.set_batch_size(absl::GetFlag(FLAGS_batch_size));
  if (config.batch_size() < 1 || config.batch_size() > 65536) {
    return absl::InvalidArgumentError("--batch_size must be in 1..65536");
  }
  config.set_seed(absl::GetFlag(FLAGS_seed));
  const double lr = absl::GetFlag(FLAGS_learning_rate);
  if (!std::isfinite(lr) || lr <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--learning_rate must be a positive number, got ", lr));
  }
  config.mutable_optimizer()->set_name(absl::GetFlag(FLAGS_optimizer));
  config.mutable_optimizer()->set_learning_rate(static_cast<float>(lr));
  const std::string& optimizer = config.optimizer().name();
  if (optimizer != "sgd" && optimizer != "momentum" && optimizer != "adam") {
    return absl::InvalidArgumentError(
        absl::StrCat("--optimizer=", optimizer, " is not known (known: sgd, momentum, adam)"));
  }
  if (optimizer == "adam") {
    const double b1 = absl::GetFlag(FLAGS_beta1), b2 = absl::GetFlag(FLAGS_beta2);
    const double eps = absl::GetFlag(FLAGS_epsilon);
    if (!(b1 >= 0 && b1 < 1) || !(b2 >= 0 && b2 < 1) || !(eps > 0)) {
      return absl::InvalidArgumentError(
          "--beta1 and --beta2 must be in [0, 1) and --epsilon positive");
    }
    config.mutable_optimizer()->set_beta1(static_cast<float>(b1));
    config.mutable_optimizer()->set_beta2(static_cast<float>(b2));
    config.mutable_optimizer()->set_epsilon(static_cast<float>(eps));
  }
  if (optimizer == "momentum") {
    const double m = absl::GetFlag(FLAGS_momentum);
    if (!(m >= 0 && m < 1)) {
      return absl::InvalidArgumentError(absl::StrCat("--momentum must be in [0, 1), got ", m));
    }
    config.mutable_optimizer()->set_momentum(static_cast<float>(m));
    config.mutable_optimizer()->set_nesterov(absl::GetFlag(FLAGS_nesterov));
  }
  return config;
}

absl::StatusOr<Timing> TimingFromFlags() {
  const double log_every = absl::GetFlag(FLAGS_log_every_s);
  const int heartbeat_ms = absl::GetFlag(FLAGS_heartbeat_ms);
  const double peer = absl::GetFlag(FLAGS_peer_timeout_s);
  const double startup = absl::GetFlag(FLAGS_startup_timeout_s);
  const double rpc = absl::GetFlag(FLAGS_rpc_timeout_s);
  if (heartbeat_ms < 10) return absl::InvalidArgumentError("--heartbeat_ms must be >= 10");
  if (!(log_every > 0)) return absl::InvalidArgumentError("--log_every_s must be > 0");
  if (!(peer * 1000 > 2 * heartbeat_ms)) {
    return absl::InvalidArgumentError("--peer_timeout_s must exceed two heartbeat intervals");
  }
  if (!(startup > 0) || !(rpc > 0)) {
    return absl::InvalidArgumentError("--startup_timeout_s and --rpc_timeout_s must be > 0");
  }
  Timing t;
  t.heartbeat_interval = absl::Milliseconds(heartbeat_ms);
  t.peer_timeout = absl::Seconds(peer);
  t.startup_timeout = absl::Seconds(startup);
  t.rpc_timeout = absl::Seconds(rpc);
  t.log_every = absl::Seconds(log_every);
  return t;
}

}  // namespace pst::common
