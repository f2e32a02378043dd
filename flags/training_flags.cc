// TrainingConfigFromFlags: in a file of its own, because it consults the
// model registry; executables that never call it (the ps) do not link the
// models.
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/optimizer_groups.h"
#include "common/status_macros.h"
#include "common/table_policy.h"
#include "flags/job_flags.h"
#include "flags/optimizer_flags.h"
#include "models/model_spec.h"
#include "models/registry.h"

namespace pst::flags {

absl::StatusOr<proto::TrainingConfig> TrainingConfigFromFlags() {
  proto::TrainingConfig config;
  config.set_model(absl::GetFlag(FLAGS_model));
  absl::StatusOr<const models::Model*> found = models::ModelFor(config);
  if (!found.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--model=", config.model(),
        " is not a known model (known: ", absl::StrJoin(models::ModelNames(), ", "), ")"));
  }
  const models::Model& model = **found;
  // A spec model's variables, read once here and sent to every task.
  if (absl::Status s = model.ReadFiles(&config); !s.ok()) return s;
  std::string hidden = absl::GetFlag(FLAGS_hidden);
  if (hidden.empty()) hidden = std::string(model.default_hidden());
  for (absl::string_view part : absl::StrSplit(hidden, ',', absl::SkipWhitespace())) {
    int units = 0;
    if (!absl::SimpleAtoi(part, &units) || units < 1 || units > (1 << 20)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--hidden=", hidden,
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

  if (absl::Status s = OptimizerFromFlags(model, &config); !s.ok()) return s;

  config.set_data(absl::GetFlag(FLAGS_data));
  config.set_eval_fraction(absl::GetFlag(FLAGS_eval_fraction));
  if (!(config.eval_fraction() > 0 && config.eval_fraction() < 1)) {
    return absl::InvalidArgumentError("--eval_fraction must be in (0, 1)");
  }
  config.set_stream_data(absl::GetFlag(FLAGS_stream_data));
  config.set_shuffle_buffer(absl::GetFlag(FLAGS_shuffle_buffer));
  config.set_eval_data(absl::GetFlag(FLAGS_eval_data));
  if (config.shuffle_buffer() < 1 || config.shuffle_buffer() > (int64_t{1} << 30)) {
    return absl::InvalidArgumentError("--shuffle_buffer must be in [1, 2^30]");
  }
  if (config.stream_data() && config.eval_data().empty()) {
    return absl::InvalidArgumentError(
        "--stream_data needs --eval_data: a stream has no tail to hold out for evaluation");
  }
  config.set_embedding_dim(absl::GetFlag(FLAGS_embedding_dim));
  if (config.embedding_dim() < 1 || config.embedding_dim() > 4096) {
    return absl::InvalidArgumentError("--embedding_dim must be in 1..4096");
  }
  config.set_buckets_per_field(absl::GetFlag(FLAGS_buckets_per_field));
  if (config.buckets_per_field() < 0) {
    return absl::InvalidArgumentError("--buckets_per_field must be >= 0 (0: hash embeddings)");
  }
  config.set_buckets(absl::GetFlag(FLAGS_buckets));
  if (config.buckets() < 0) {
    return absl::InvalidArgumentError("--buckets must be >= 0 (0: a hash table)");
  }
  config.set_admit_after(absl::GetFlag(FLAGS_admit_after));
  if (config.admit_after() < 0) return absl::InvalidArgumentError("--admit_after must be >= 0");
  config.set_table_capacity(absl::GetFlag(FLAGS_table_capacity));
  config.set_table_eviction(absl::GetFlag(FLAGS_table_eviction));
  PST_RETURN_IF_ERROR(common::ParseTablePolicy(config.table_capacity(), config.table_eviction(),
                                               "--table_capacity/--table_eviction")
                          .status());

  config.set_placement(absl::GetFlag(FLAGS_placement));
  if (config.placement() != "round_robin" && config.placement() != "size_balanced") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--placement=", config.placement(), " is not known (known: round_robin, size_balanced)"));
  }
  config.set_ps_replicas(absl::GetFlag(FLAGS_ps_replicas));
  if (absl::Status s = CheckPsReplicas(config.ps_replicas(), std::nullopt); !s.ok()) return s;
  proto::Partitioner* partitioner = config.mutable_partitioner();
  partitioner->set_kind(absl::GetFlag(FLAGS_partitioner));
  partitioner->set_num_shards(absl::GetFlag(FLAGS_num_shards));
  partitioner->set_min_slice_bytes(absl::GetFlag(FLAGS_min_slice_bytes));
  partitioner->set_max_partitions(absl::GetFlag(FLAGS_max_partitions));
  partitioner->set_max_shard_bytes(absl::GetFlag(FLAGS_max_shard_bytes));
  const std::string& kind = partitioner->kind();
  if (kind != "none" && kind != "fixed" && kind != "min_max" && kind != "axis_size") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--partitioner=", kind, " is not known (known: none, fixed, min_max, axis_size)"));
  }
  if (kind == "fixed" && partitioner->num_shards() < 1) {
    return absl::InvalidArgumentError("--partitioner=fixed needs --num_shards >= 1");
  }
  if (partitioner->min_slice_bytes() < 1 || partitioner->max_shard_bytes() < 1 ||
      partitioner->max_partitions() < 0) {
    return absl::InvalidArgumentError(
        "--min_slice_bytes and --max_shard_bytes must be positive, --max_partitions >= 0");
  }
  config.set_overlap(absl::GetFlag(FLAGS_overlap));
  if (const std::string wire = absl::GetFlag(FLAGS_wire_dtype); wire == "bf16") {
    config.set_wire_dtype(proto::DT_BFLOAT16);
  } else if (wire != "float32") {
    return absl::InvalidArgumentError(
        absl::StrCat("--wire_dtype=", wire, " is not known (known: float32, bf16)"));
  }
  if (const std::string compression = absl::GetFlag(FLAGS_gradient_compression);
      compression != "none") {
    double ratio = 0;
    if (!absl::StartsWith(compression, "topk:") ||
        !absl::SimpleAtod(compression.substr(5), &ratio) || !(ratio > 0 && ratio <= 1)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--gradient_compression=", compression,
                       " is not known (known: none, topk:RATIO with 0 < RATIO <= 1)"));
    }
    config.set_topk_ratio(ratio);
  }
  config.set_dense_piece_bytes(absl::GetFlag(FLAGS_dense_piece_bytes));
  if (config.dense_piece_bytes() < 0) {
    return absl::InvalidArgumentError("--dense_piece_bytes must be >= 0 (0: never cut)");
  }
  const std::string mode = absl::GetFlag(FLAGS_mode);
  proto::SyncConfig* sync = config.mutable_sync();
  if (mode == "async") {
    sync->set_mode(proto::ASYNC);
  } else if (mode == "sync") {
    sync->set_mode(proto::SYNC);
  } else if (mode == "ssp") {
    sync->set_mode(proto::SSP);
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("--mode=", mode, " is not known (known: async, sync, ssp)"));
  }
  sync->set_staleness(absl::GetFlag(FLAGS_staleness));
  sync->set_replicas_to_aggregate(absl::GetFlag(FLAGS_replicas_to_aggregate));
  if (sync->staleness() < 0 || sync->replicas_to_aggregate() < 0) {
    return absl::InvalidArgumentError("--staleness and --replicas_to_aggregate must be >= 0");
  }
  const std::string routing = absl::GetFlag(FLAGS_routing);
  if (routing == "mod") {
    config.set_routing(proto::MOD);
  } else if (routing == "div") {
    config.set_routing(proto::DIV);
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("--routing=", routing, " is not known (known: mod, div)"));
  }
  if (absl::Status s = model.CheckConfig(config); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--model=", config.model(), ": ", s.message()));
  }
  absl::StatusOr<std::vector<models::ModelVariable>> variables = model.Variables(config);
  if (!variables.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--model=", config.model(), ": ", variables.status().message()));
  }
  // Every group takes some variable, and no variable is in two.
  if (absl::Status s = common::CheckOptimizerGroups(config, models::GroupedVariables(*variables));
      !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        absl::GetFlag(FLAGS_table_optimizer).empty() ? "" : "--table_optimizer: ", s.message()));
  }
  return config;
}

}  // namespace pst::flags
