// Command-line flags shared by the daemons (and forwarded by the launcher).
// Only executables link this, so no library carries global flags.
#ifndef PST_FLAGS_JOB_FLAGS_H_
#define PST_FLAGS_JOB_FLAGS_H_

#include <optional>
#include <string>

#include "absl/flags/declare.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/metrics.h"
#include "common/progress.h"
#include "common/timing.h"
#include "proto/pstrain.pb.h"
#include "rpc/grpc_channel.h"

ABSL_DECLARE_FLAG(std::string, tf_config);
ABSL_DECLARE_FLAG(std::string, bind);
ABSL_DECLARE_FLAG(std::string, data_dir);
ABSL_DECLARE_FLAG(std::string, model);
ABSL_DECLARE_FLAG(std::string, hidden);
ABSL_DECLARE_FLAG(int32_t, epochs);
ABSL_DECLARE_FLAG(int64_t, max_steps);
ABSL_DECLARE_FLAG(int32_t, batch_size);
ABSL_DECLARE_FLAG(double, learning_rate);
ABSL_DECLARE_FLAG(std::string, optimizer);
ABSL_DECLARE_FLAG(std::string, optimizer_form);
ABSL_DECLARE_FLAG(double, momentum);
ABSL_DECLARE_FLAG(bool, nesterov);
ABSL_DECLARE_FLAG(double, beta1);
ABSL_DECLARE_FLAG(double, beta2);
ABSL_DECLARE_FLAG(double, epsilon);
ABSL_DECLARE_FLAG(double, initial_accumulator);
ABSL_DECLARE_FLAG(double, l1);
ABSL_DECLARE_FLAG(double, l2);
ABSL_DECLARE_FLAG(double, lr_power);
ABSL_DECLARE_FLAG(double, weight_decay);
ABSL_DECLARE_FLAG(double, rho);
ABSL_DECLARE_FLAG(bool, centered);
ABSL_DECLARE_FLAG(double, lr_decay);
ABSL_DECLARE_FLAG(double, clip_value);
ABSL_DECLARE_FLAG(double, clip_norm);
ABSL_DECLARE_FLAG(std::string, table_optimizer);
ABSL_DECLARE_FLAG(double, table_learning_rate);
ABSL_DECLARE_FLAG(std::string, lr_schedule);
ABSL_DECLARE_FLAG(bool, skip_nonfinite);
ABSL_DECLARE_FLAG(std::string, data);
ABSL_DECLARE_FLAG(double, eval_fraction);
ABSL_DECLARE_FLAG(bool, stream_data);
ABSL_DECLARE_FLAG(int64_t, shuffle_buffer);
ABSL_DECLARE_FLAG(std::string, eval_data);
ABSL_DECLARE_FLAG(int32_t, embedding_dim);
ABSL_DECLARE_FLAG(int64_t, buckets_per_field);
ABSL_DECLARE_FLAG(int64_t, buckets);
ABSL_DECLARE_FLAG(int32_t, admit_after);
ABSL_DECLARE_FLAG(int64_t, table_capacity);
ABSL_DECLARE_FLAG(std::string, table_eviction);
ABSL_DECLARE_FLAG(std::string, table_store_dir);
ABSL_DECLARE_FLAG(int64_t, table_store_cache_bytes);
ABSL_DECLARE_FLAG(std::string, placement);
ABSL_DECLARE_FLAG(int32_t, ps_replicas);
ABSL_DECLARE_FLAG(std::string, partitioner);
ABSL_DECLARE_FLAG(int32_t, num_shards);
ABSL_DECLARE_FLAG(int64_t, min_slice_bytes);
ABSL_DECLARE_FLAG(int32_t, max_partitions);
ABSL_DECLARE_FLAG(int64_t, max_shard_bytes);
ABSL_DECLARE_FLAG(std::string, routing);
ABSL_DECLARE_FLAG(bool, overlap);
ABSL_DECLARE_FLAG(std::string, wire_dtype);
ABSL_DECLARE_FLAG(std::string, gradient_compression);
ABSL_DECLARE_FLAG(int64_t, dense_piece_bytes);
ABSL_DECLARE_FLAG(std::string, mode);
ABSL_DECLARE_FLAG(int32_t, staleness);
ABSL_DECLARE_FLAG(int32_t, replicas_to_aggregate);
ABSL_DECLARE_FLAG(uint64_t, seed);
ABSL_DECLARE_FLAG(std::string, summary_json);
ABSL_DECLARE_FLAG(std::string, summary_dir);
ABSL_DECLARE_FLAG(int32_t, metrics_port);
ABSL_DECLARE_FLAG(int64_t, summary_steps);
ABSL_DECLARE_FLAG(int32_t, num_workers);
ABSL_DECLARE_FLAG(double, log_every_s);
ABSL_DECLARE_FLAG(pst::common::ProgressMode, progress);
ABSL_DECLARE_FLAG(std::string, checkpoint_dir);
ABSL_DECLARE_FLAG(int64_t, save_checkpoints_steps);
ABSL_DECLARE_FLAG(double, save_checkpoints_secs);
ABSL_DECLARE_FLAG(int64_t, incremental_save_steps);
ABSL_DECLARE_FLAG(double, incremental_save_secs);
ABSL_DECLARE_FLAG(bool, reset_slots);
ABSL_DECLARE_FLAG(int32_t, keep_checkpoints);
ABSL_DECLARE_FLAG(int32_t, checkpoint_every_epochs);
ABSL_DECLARE_FLAG(int32_t, eval_every_epochs);
ABSL_DECLARE_FLAG(double, evaluator_wait_s);
ABSL_DECLARE_FLAG(std::string, best_metric);
ABSL_DECLARE_FLAG(std::string, best_mode);
ABSL_DECLARE_FLAG(int32_t, heartbeat_ms);
ABSL_DECLARE_FLAG(double, peer_timeout_s);
ABSL_DECLARE_FLAG(double, startup_timeout_s);
ABSL_DECLARE_FLAG(double, rpc_timeout_s);
ABSL_DECLARE_FLAG(double, recovery_timeout_s);
// Devices of a worker (device/device_mapping.h has their meaning).
ABSL_DECLARE_FLAG(std::string, device);
ABSL_DECLARE_FLAG(std::string, gpus);
ABSL_DECLARE_FLAG(std::string, gpu_memory);
ABSL_DECLARE_FLAG(int32_t, virtual_devices);
ABSL_DECLARE_FLAG(int32_t, cpu_devices);
ABSL_DECLARE_FLAG(bool, log_device_placement);
// Transport security (common/transport_security.h has their meaning).
ABSL_DECLARE_FLAG(bool, bdp_probe);
// Fault injection for tests: a ps's save waits this long (only --helpfull
// lists it).
ABSL_DECLARE_FLAG(int32_t, test_save_delay_ms);
// gRPC server limits (rpc/grpc_channel.h: ServerLimits).
ABSL_DECLARE_FLAG(int32_t, grpc_max_concurrent_streams);
ABSL_DECLARE_FLAG(int64_t, grpc_memory_quota_mb);
ABSL_DECLARE_FLAG(int32_t, grpc_max_threads);
ABSL_DECLARE_FLAG(int64_t, grpc_max_control_message_mb);
ABSL_DECLARE_FLAG(std::string, tls_cert);
ABSL_DECLARE_FLAG(std::string, tls_key);
ABSL_DECLARE_FLAG(std::string, tls_ca);
ABSL_DECLARE_FLAG(std::string, tls_server_name);
ABSL_DECLARE_FLAG(std::string, auth_token_file);
ABSL_DECLARE_FLAG(std::string, role_tokens_file);

namespace pst::flags {

// The Prometheus exporter of --metrics_port (null when 0) on the host the
// daemon's gRPC server listens on (ListenHost(--bind): every interface
// unless --bind names a host). The main passes it on to what it runs.
// Errors: InvalidArgument for a bad port, Unavailable when it cannot be
// bound.
absl::StatusOr<std::unique_ptr<common::MetricsExporter>> StartMetricsFromFlags(
    const std::string& task);

// The gRPC settings of the flags, for a main to hand to what it runs:
// LoadTransportSecurity of the --tls_* and --auth_token_file flags,
// --bdp_probe, and the server limits of the --grpc_* flags. Errors: as
// LoadTransportSecurity (a bad flag, an unreadable file); InvalidArgument
// for a negative --grpc_* limit.
absl::StatusOr<rpc::RpcSettings> RpcSettingsFromFlags();

// The training settings the coordinator decides and sends to every worker.
// InvalidArgument names a flag whose value is out of range.
absl::StatusOr<proto::TrainingConfig> TrainingConfigFromFlags();

// --ps_replicas=`replicas`: 1, or 2 with at least 2 ps when `num_ps` (the
// cluster's ps count) is known. InvalidArgument otherwise, naming the flag
// and the fix. Part of CheckBeforeStart (flags/start_checks.h); here, in a
// file without the models, so that the ps, which links none, runs it too.
absl::Status CheckPsReplicas(int replicas, std::optional<int> num_ps);

// Timeouts and intervals (common/timing.h), read from the flags above.
absl::StatusOr<common::Timing> TimingFromFlags();

}  // namespace pst::flags

#endif  // PST_FLAGS_JOB_FLAGS_H_
