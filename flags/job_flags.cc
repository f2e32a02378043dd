#include "flags/job_flags.h"

#include <cmath>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/metrics.h"
#include "common/optimizer_config.h"
#include "common/transport_security.h"
#include "rpc/grpc_channel.h"

ABSL_FLAG(std::string, tf_config, "",
          "Cluster spec as TF_CONFIG JSON, or @path to a file holding it. Default: the "
          "TF_CONFIG environment variable.");
ABSL_FLAG(std::string, bind, "",
          "ps and chief: where to listen, host or host:port (default: every interface, at this "
          "task's TF_CONFIG port). Peers still use the TF_CONFIG address. Every daemon's "
          "--metrics_port listens on this host too (default: every interface).");
ABSL_FLAG(std::string, data_dir, "/usr/share/datasets/fashion-mnist",
          "Directory with the Fashion-MNIST IDX files (Debian's dataset-fashion-mnist).");
ABSL_FLAG(std::string, model, "mlp",
          "Model to train: mlp (Fashion-MNIST), wide_deep (Criteo-format CTR data) or logreg "
          "(sparse logistic regression on libsvm data).");
ABSL_FLAG(std::string, hidden, "",
          "Hidden layer widths, comma-separated. Default: 256,128 for mlp, 64,32 for wide_deep "
          "(logreg has none).");
ABSL_FLAG(std::string, data, "",
          "wide_deep: a Criteo-format file that every task can read (pstrain local also takes "
          "'generate' or 'generate:rows=N,vocab=V,seed=S'). logreg: a libsvm file, or "
          "'generate' or 'generate:rows=N,features=F,seed=S'.");
ABSL_FLAG(double, eval_fraction, 0.1,
          "wide_deep, logreg: the last fraction of --data held out for evaluation (unless "
          "--eval_data names a held-out set of its own).");
ABSL_FLAG(bool, stream_data, false,
          "wide_deep, logreg: read --data as a stream instead of loading it whole: a file, a "
          "directory, a glob or a comma list of them, plain or .gz; each worker reads only its "
          "share (every W-th file, or its byte range of a single file), shuffled in blocks of "
          "--shuffle_buffer examples. Needs --eval_data for the held-out set.");
ABSL_FLAG(int64_t, shuffle_buffer, 10000,
          "--stream_data: examples per shuffled block (1: the input's order).");
ABSL_FLAG(std::string, eval_data, "",
          "wide_deep, logreg: the held-out set's own input (a file, directory, glob or comma "
          "list; plain or .gz), streamed by the chief and the evaluator; nothing of --data is "
          "then held out.");
ABSL_FLAG(int32_t, embedding_dim, 8, "wide_deep: width of the deep embedding rows.");
ABSL_FLAG(int64_t, buckets_per_field, 100000,
          "wide_deep: embedding rows per categorical field; 0 for hash embeddings (unbounded ids, "
          "rows created on first touch).");
ABSL_FLAG(int64_t, buckets, 0,
          "logreg: rows of the weight table, feature ids folded into them; 0 for a hash table "
          "(ids up to 2^64, rows created on first touch).");
ABSL_FLAG(int32_t, admit_after, 0,
          "Hash embeddings: create a row only after its id was seen this many times.");
ABSL_FLAG(int64_t, table_capacity, 0,
          "Hash embeddings: rows each table keeps per ps (per partition); past it, rows are "
          "evicted by --table_eviction (lru when unset). 0: no bound but the ps's "
          "--max_table_rows.");
ABSL_FLAG(std::string, table_eviction, "",
          "Hash embeddings: which rows go: lru, lfu, lfu:<half-life in versions>, or "
          "ttl:<versions> (rows not updated for that many versions of their table go, full or "
          "not). An evicted row is forgotten: it comes back from its initializer, with fresh "
          "optimizer slots; with --table_store_dir, a row evicted for room goes to disk "
          "instead, and comes back from there.");
ABSL_FLAG(std::string, table_store_dir, "",
          "The disk tier of hash embeddings with a --table_capacity: each ps keeps the rows "
          "past the capacity on local disk, in RocksDB under DIR/ps-<index> (made if missing, "
          "emptied at start: checkpoints are the durable copy). Empty: rows evicted are "
          "forgotten. Only the ps reads it.");
ABSL_FLAG(int64_t, table_store_cache_bytes, int64_t{64} << 20,
          "With --table_store_dir: bytes of each ps's RocksDB block cache (rows read from "
          "disk); RocksDB's write buffers take up to as much again.");
ABSL_FLAG(std::string, placement, "size_balanced",
          "Placement of variables over the ps: round_robin or size_balanced.");
ABSL_FLAG(int32_t, ps_replicas, 1,
          "Copies of each shard of the variables: 1, or 2 for a primary and a backup on "
          "different ps (every change is forwarded to the backup before it is acknowledged; "
          "needs at least 2 ps).");
ABSL_FLAG(std::string, partitioner, "min_max",
          "How embedding tables are split: none, fixed (--num_shards), min_max (--min_slice_bytes, "
          "--max_partitions) or axis_size (--max_shard_bytes).");
ABSL_FLAG(int32_t, num_shards, 0, "fixed partitioner: partitions per table (0: one per ps).");
ABSL_FLAG(int64_t, min_slice_bytes, 256 << 10, "min_max partitioner: smallest slice.");
ABSL_FLAG(int32_t, max_partitions, 0, "min_max partitioner: most partitions (0: 4 per ps).");
ABSL_FLAG(int64_t, max_shard_bytes, 64 << 20, "axis_size partitioner: largest slice.");
ABSL_FLAG(int64_t, dense_piece_bytes, 512 << 10,
          "Dense variables bigger than this are cut into pieces of at most this size, spread "
          "over the ps and sent in requests of about this size (client/ps_client.h), so big "
          "tensors pipeline; 0: never cut.");
ABSL_FLAG(bool, overlap, false,
          "async or ssp; mlp, wide_deep, logreg: compute the next batch while the last step's "
          "pushes are in flight (compute and communication overlap, from values one step "
          "older; ssp's bound on how far a worker runs ahead holds as it is).");
ABSL_FLAG(std::string, wire_dtype, "float32",
          "The dtype workers send dense gradients and receive dense values in: float32, or "
          "bf16 (half the bytes, rounded to nearest even at each end; the ps keep float32 "
          "values and optimizer slots). Rows of tables always travel as float32.");
ABSL_FLAG(std::string, gradient_compression, "none",
          "none, or topk:RATIO (0 < RATIO <= 1): every worker pushes only that share of each "
          "dense gradient's entries, the largest, and adds the rest to its next step's "
          "gradient (error feedback). The residual lives in the worker: a restarted worker "
          "loses it, and a job's exact recovery is promised only without compression.");
ABSL_FLAG(std::string, routing, "mod", "Id routing of partitioned tables: mod or div.");
ABSL_FLAG(std::string, mode, "async",
          "How workers agree on parameters: async, sync (bulk synchronous, averaged steps) or ssp "
          "(stale synchronous, bounded by --staleness).");
ABSL_FLAG(int32_t, staleness, 2, "ssp: how many steps a worker may run ahead of the slowest.");
ABSL_FLAG(int32_t, replicas_to_aggregate, 0,
          "sync: gradients averaged per step (0: every worker). Fewer than the workers makes the "
          "rest backup workers: the slowest pushes of each step are dropped.");
ABSL_FLAG(int32_t, epochs, 3, "Passes over each worker's shard of the training data.");
ABSL_FLAG(int64_t, max_steps, 0,
          "Stop when the global step (pushes applied) reaches this; 0 means no limit.");
ABSL_FLAG(int32_t, batch_size, 64, "Examples per worker step.");
ABSL_FLAG(double, learning_rate, 0,
          "Optimizer learning rate (0: the model's own, 0.001 for mlp and wide_deep).");
ABSL_FLAG(std::string, optimizer, "",
          "Optimizer run on the ps: sgd, momentum, adam, adamw, adagrad, rmsprop, adadelta or "
          "ftrl (empty: the model's own, adam for mlp and wide_deep).");
ABSL_FLAG(std::string, optimizer_form, "",
          "Whose update rule the optimizer follows: tensorflow (the default) or torch "
          "(docs/optimizers.md).");
ABSL_FLAG(double, momentum, -1,
          "Momentum coefficient, for momentum and rmsprop (-1: 0.9 for momentum, 0 for "
          "rmsprop).");
ABSL_FLAG(bool, nesterov, false, "Nesterov momentum, for --optimizer=momentum.");
ABSL_FLAG(double, beta1, 0.9, "Adam's first-moment decay, for adam and adamw.");
ABSL_FLAG(double, beta2, 0.999, "Adam's second-moment decay, for adam and adamw.");
ABSL_FLAG(double, epsilon, 0,
          "Epsilon of adam, adamw, adagrad, rmsprop and adadelta (0: the form's default).");
ABSL_FLAG(double, initial_accumulator, 0,
          "Adagrad's and FTRL's initial accumulator, rmsprop's mean square (0: the form's "
          "default: TensorFlow's 0.1 for adagrad and ftrl, else 0).");
ABSL_FLAG(double, weight_decay, 0,
          "Weight decay: decoupled for adamw, torch's coupled L2 for the others (not ftrl).");
ABSL_FLAG(double, rho, 0, "Decay of rmsprop (torch's alpha) and adadelta (0: the default).");
ABSL_FLAG(bool, centered, false, "Centered rmsprop.");
ABSL_FLAG(double, lr_decay, 0, "Adagrad: the rate is lr / (1 + (t - 1) * lr_decay).");
ABSL_FLAG(double, clip_value, 0,
          "On the ps, clip every gradient element to [-v, v] before the update (0: off).");
ABSL_FLAG(std::string, table_optimizer, "",
          "An optimizer of their own for the tables (and hash embeddings), e.g. adagrad with "
          "--optimizer=adam for the dense variables; the other optimizer flags apply to both.");
ABSL_FLAG(double, table_learning_rate, 0,
          "With --table_optimizer: the tables' learning rate (0: --learning_rate's).");
ABSL_FLAG(double, clip_norm, 0,
          "On every worker, scale each step's whole gradient (dense and rows) to a global L2 "
          "norm of at most this before it is pushed (0: off).");
ABSL_FLAG(std::string, lr_schedule, "",
          "Learning-rate schedule by step, computed on the ps: e.g. "
          "warmup:500,cosine:10000,min:1e-5 or step:3,gamma:0.7,every:469 (docs/optimizers.md).");
ABSL_FLAG(double, l1, 0, "FTRL: L1 regularization strength.");
ABSL_FLAG(double, l2, 0, "FTRL: L2 regularization strength.");
ABSL_FLAG(double, lr_power, -0.5, "FTRL: learning rate power (<= 0).");
ABSL_FLAG(bool, skip_nonfinite, false,
          "Skip (and count) gradient rows holding NaN or Inf instead of rejecting the push.");
ABSL_FLAG(uint64_t, seed, 1, "Seed for initialization and data shuffling.");
ABSL_FLAG(std::string, summary_json, "",
          "If set, the chief writes the job's final figures to this file as JSON.");
ABSL_FLAG(std::string, summary_dir, "",
          "If set, the chief writes TensorBoard event files here: loss, examples/s and "
          "staleness every --summary_steps updates, and the test metrics at the end.");
ABSL_FLAG(int64_t, summary_steps, 100, "Updates between TensorBoard scalars (--summary_dir).");
ABSL_FLAG(int32_t, metrics_port, 0,
          "Serve Prometheus metrics on this port at /metrics (0: off), on --bind's host "
          "(default: every interface), to 8 connections at once, each given 5 s to send its "
          "request. pstrain local gives its daemons this port and the ones after it.");
ABSL_FLAG(int32_t, num_workers, 0,
          "When > 0: the job has this many workers whatever TF_CONFIG's worker list says, "
          "named after its first entry (host-0, host-1, ... at its port). For replicas of one "
          "worker service that claim their indices (worker --claim_worker_index), e.g. "
          "docker-compose with PSTRAIN_WORKERS=N. Give every daemon the same value.");
ABSL_FLAG(double, log_every_s, 5, "Seconds between the chief's progress lines.");
ABSL_FLAG(pst::common::ProgressMode, progress, pst::common::ProgressMode::kAuto,
          "How the chief (and pstrain local) show progress: tty (one live line rewritten in "
          "place: epoch, step/total, loss, examples/s, ETA), plain (a log line every "
          "--log_every_s), off, or auto (tty when stderr, for pstrain local stdout, is a "
          "terminal, else plain).");
ABSL_FLAG(std::string, checkpoint_dir, "",
          "Where checkpoints live: the same shared directory for the chief and every ps (it may "
          "be mounted at another path on each). The chief writes manifests there, each ps its "
          "shards, and a ps reads and writes nowhere else; a ps without it refuses Save and "
          "Restore. A job started with a checkpoint there resumes from the newest valid one.");
ABSL_FLAG(int64_t, save_checkpoints_steps, 0,
          "Save a checkpoint every this many updates (0: off).");
ABSL_FLAG(double, save_checkpoints_secs, 0, "Save a checkpoint every this many seconds (0: off).");
ABSL_FLAG(int64_t, incremental_save_steps, 0,
          "Between full checkpoints, save an incremental one every this many updates (0: off): "
          "only what changed since the checkpoint before (rows with their slots and counts, "
          "dense variables whose version moved), as a chain on the last full one. Without "
          "--save_checkpoints_steps/_secs the first save is full and the rest incremental.");
ABSL_FLAG(bool, reset_slots, false,
          "Resume from a checkpoint whose variables were saved with another optimizer (name, "
          "form or slots) than they train with now: restore their values and start their "
          "slots afresh, instead of refusing.");
ABSL_FLAG(double, incremental_save_secs, 0,
          "Save an incremental checkpoint every this many seconds (0: off); see "
          "--incremental_save_steps.");
ABSL_FLAG(int32_t, keep_checkpoints, 5,
          "Checkpoints kept, counted in chains (a full checkpoint and the incremental ones on "
          "it); older ones are deleted.");
ABSL_FLAG(int32_t, checkpoint_every_epochs, 0,
          "Save a checkpoint each time every worker has completed this many more epochs (0: "
          "off), beside --save_checkpoints_steps/_secs.");
ABSL_FLAG(int32_t, eval_every_epochs, 0,
          "Evaluate each time every worker has completed this many more epochs (0: off). With "
          "an evaluator task, the chief saves a checkpoint then and the evaluator evaluates it; "
          "without one, the chief evaluates the model the ps hold (built-in models).");
ABSL_FLAG(double, evaluator_wait_s, 300,
          "How long the end of the job waits for the evaluator tasks to report the final "
          "checkpoint.");
ABSL_FLAG(std::string, best_metric, "",
          "evaluator: the metric that picks the best checkpoint, kept in <checkpoint_dir>/best "
          "(empty: the first of test_accuracy, test_auc, accuracy, auc the evaluation reports).");
ABSL_FLAG(std::string, best_mode, "auto",
          "evaluator: max, min, or auto (min for a metric named *loss* or *error*, else max).");
ABSL_FLAG(int32_t, heartbeat_ms, 1000, "Milliseconds between heartbeats.");
ABSL_FLAG(double, peer_timeout_s, 15,
          "Seconds without a heartbeat after which a peer is declared dead.");
ABSL_FLAG(double, startup_timeout_s, 120, "Seconds to wait for the cluster's tasks to come up.");
ABSL_FLAG(double, rpc_timeout_s, 60, "Deadline of one Pull or Push RPC, in seconds.");
ABSL_FLAG(double, recovery_timeout_s, 300,
          "How long a failure may last before the job gives up: the chief waits this long for "
          "a lost ps to come back, workers wait this long for the ps or the chief, and a "
          "worker silent this long is given up on.");
ABSL_FLAG(std::string, device, "cpu",
          "Where a worker computes: cpu, gpu (fails if no GPU is visible) or auto (the GPUs if "
          "any is visible, else the CPU).");
ABSL_FLAG(std::string, gpus, "",
          "GPUs a worker uses, as physical indices (nvidia-smi's numbering), e.g. 1,2; logical "
          "device GPU:k is the k-th. Empty: every GPU that CUDA_VISIBLE_DEVICES leaves visible.");
ABSL_FLAG(std::string, gpu_memory, "growth",
          "GPU memory budget per logical device: growth (take memory as needed, up to the GPU), "
          "fraction:F (at most F of the GPU) or limit_mb:M (at most M MiB). Never allocated "
          "ahead; exceeding it is a ResourceExhausted error naming the budget.");
ABSL_FLAG(int32_t, virtual_devices, 1,
          "Logical devices per GPU, each with its own share of the memory budget.");
ABSL_FLAG(int32_t, cpu_devices, 1,
          "Logical CPU devices of a worker with --device=cpu (the batch is split across them).");
ABSL_FLAG(bool, log_device_placement, false,
          "Log where each variable copy and each op of the model runs.");
ABSL_FLAG(bool, bdp_probe, true,
          "gRPC's BDP probing on the dense data plane (the ps's server side and the "
          "workers' dense connections). false: a fixed 16 MiB HTTP/2 window instead: about "
          "25% more throughput on tensors of megabytes over loopback, 10-15% fewer "
          "examples/s for the small Fashion-MNIST MLP. Give every daemon the same.");
// Fault injection for tests, forwarded by `pstrain local` like the job
// flags. Defined here, not in a main, so that only --helpfull lists it.
ABSL_FLAG(int32_t, test_save_delay_ms, 0,
          "For tests only (fault injection): every checkpoint save of a ps waits this many ms "
          "between its snapshot and its file, so that a test can kill the ps during a save. "
          "Other daemons ignore it.");
ABSL_FLAG(std::string, tls_cert, "",
          "PEM certificate chain of this process; with --tls_key, daemons serve TLS.");
ABSL_FLAG(std::string, tls_key, "", "PEM private key for --tls_cert.");
ABSL_FLAG(std::string, tls_ca, "",
          "PEM CA the cluster's certificates are signed by: clients verify servers against it, "
          "and servers require client certificates signed by it (mutual TLS).");
ABSL_FLAG(std::string, tls_server_name, "",
          "Name expected in server certificates when it is not the TF_CONFIG host.");
ABSL_FLAG(std::string, auth_token_file, "",
          "File holding the token this process sends with every RPC: the cluster's shared "
          "secret, or this task's own token under --role_tokens_file. Servers answer "
          "UNAUTHENTICATED without the right one. Needs TLS.");
ABSL_FLAG(std::string, role_tokens_file, "",
          "Servers (ps, chief): a table of per-role tokens, one line each: the token's SHA-256 "
          "(hex) and the task it speaks for (worker-3.pstrain). Each caller's role then comes "
          "from its token; other tokens are UNAUTHENTICATED. Needs TLS. See "
          "docs/security.md.");

ABSL_FLAG(int32_t, grpc_max_concurrent_streams, pst::rpc::ServerLimits().max_concurrent_streams,
          "Calls one client connection may have open at once on a daemon's gRPC server; more "
          "wait in the client's queue (0: no limit). Each dense piece in flight and each "
          "parked SYNC/SSP pull holds one.");
ABSL_FLAG(int64_t, grpc_memory_quota_mb, pst::rpc::ServerLimits().memory_quota_bytes >> 20,
          "Memory a daemon's gRPC server may use for its buffers (gRPC resource quota): near "
          "it gRPC reads more slowly and may close idle connections (0: no limit).");
ABSL_FLAG(int32_t, grpc_max_threads, pst::rpc::ServerLimits().max_threads,
          "Threads of a daemon's gRPC server's resource quota (0: no limit). It counts "
          "gRPC's synchronous-API threads; pstrain's services use the callback API.");
ABSL_FLAG(int64_t, grpc_max_control_message_mb,
          static_cast<int64_t>(pst::rpc::ServerLimits().max_control_message_bytes >> 20),
          "Largest request, in MiB, of a control call (CreateVariables, Save, Restore, "
          "SetMembership, Health, Shutdown on the ps; every Coordinator call on the chief), "
          "refused RESOURCE_EXHAUSTED unparsed above it (0: up to the 512 MiB every call may "
          "carry). The data plane (Pull, Push, PushPull, PullRows, PushRows) takes 512 MiB.");

namespace pst::flags {

absl::Status CheckPsReplicas(int replicas, std::optional<int> num_ps) {
  if (replicas != 1 && replicas != 2) {
    return absl::InvalidArgumentError(absl::StrCat("--ps_replicas=", replicas,
                                                   ": 1 (one copy of each shard) or 2 (a primary "
                                                   "and a backup) are supported"));
  }
  if (replicas == 2 && num_ps.has_value() && *num_ps < 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--ps_replicas=2 keeps each shard's backup on another ps, and the cluster has ", *num_ps,
        " ps: give it at least 2 ps (pstrain local: --ps=2), or --ps_replicas=1"));
  }
  return absl::OkStatus();
}

absl::StatusOr<common::Timing> TimingFromFlags() {
  const double log_every = absl::GetFlag(FLAGS_log_every_s);
  const int heartbeat_ms = absl::GetFlag(FLAGS_heartbeat_ms);
  const double peer = absl::GetFlag(FLAGS_peer_timeout_s);
  const double startup = absl::GetFlag(FLAGS_startup_timeout_s);
  const double rpc = absl::GetFlag(FLAGS_rpc_timeout_s);
  const double recovery = absl::GetFlag(FLAGS_recovery_timeout_s);
  if (heartbeat_ms < 10) return absl::InvalidArgumentError("--heartbeat_ms must be >= 10");
  if (!(log_every > 0)) return absl::InvalidArgumentError("--log_every_s must be > 0");
  if (!(peer * 1000 > 2 * heartbeat_ms)) {
    return absl::InvalidArgumentError("--peer_timeout_s must exceed two heartbeat intervals");
  }
  if (!(startup > 0) || !(rpc > 0)) {
    return absl::InvalidArgumentError("--startup_timeout_s and --rpc_timeout_s must be > 0");
  }
  if (!(recovery > 0)) return absl::InvalidArgumentError("--recovery_timeout_s must be > 0");
  common::Timing t;
  t.heartbeat_interval = absl::Milliseconds(heartbeat_ms);
  t.peer_timeout = absl::Seconds(peer);
  t.startup_timeout = absl::Seconds(startup);
  t.rpc_timeout = absl::Seconds(rpc);
  t.recovery_timeout = absl::Seconds(recovery);
  t.log_every = absl::Seconds(log_every);
  return t;
}

absl::StatusOr<std::unique_ptr<common::MetricsExporter>> StartMetricsFromFlags(
    const std::string& task) {
  const int port = absl::GetFlag(FLAGS_metrics_port);
  if (port == 0) return std::unique_ptr<common::MetricsExporter>();
  if (port < 0 || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("--metrics_port=", port, " is not a port"));
  }
  absl::StatusOr<std::unique_ptr<common::MetricsExporter>> exporter =
      common::MetricsExporter::Start(rpc::ListenHost(absl::GetFlag(FLAGS_bind)), port, task);
  return exporter;
}

absl::StatusOr<rpc::RpcSettings> RpcSettingsFromFlags() {
  rpc::RpcSettings settings;
  settings.dense_bdp_probe = absl::GetFlag(FLAGS_bdp_probe);
  rpc::ServerLimits& limits = settings.limits;
  limits.max_concurrent_streams = absl::GetFlag(FLAGS_grpc_max_concurrent_streams);
  const int64_t memory_mb = absl::GetFlag(FLAGS_grpc_memory_quota_mb);
  limits.max_threads = absl::GetFlag(FLAGS_grpc_max_threads);
  const int64_t control_mb = absl::GetFlag(FLAGS_grpc_max_control_message_mb);
  if (limits.max_concurrent_streams < 0 || memory_mb < 0 || memory_mb > (int64_t{1} << 30) ||
      limits.max_threads < 0 || control_mb < 0 || control_mb > (rpc::kMaxMessageBytes >> 20)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--grpc_max_concurrent_streams=", limits.max_concurrent_streams,
        ", --grpc_memory_quota_mb=", memory_mb, ", --grpc_max_threads=", limits.max_threads,
        ", --grpc_max_control_message_mb=", control_mb,
        ": each must be >= 0 (0: no limit), and the control limit at most ",
        rpc::kMaxMessageBytes >> 20));
  }
  limits.memory_quota_bytes = memory_mb << 20;
  limits.max_control_message_bytes = static_cast<size_t>(control_mb) << 20;
  common::SecurityFiles files;
  files.tls_cert = absl::GetFlag(FLAGS_tls_cert);
  files.tls_key = absl::GetFlag(FLAGS_tls_key);
  files.tls_ca = absl::GetFlag(FLAGS_tls_ca);
  files.auth_token_file = absl::GetFlag(FLAGS_auth_token_file);
  files.tls_server_name = absl::GetFlag(FLAGS_tls_server_name);
  files.role_tokens_file = absl::GetFlag(FLAGS_role_tokens_file);
  absl::StatusOr<common::TransportSecurity> security = common::LoadTransportSecurity(files);
  if (!security.ok()) return security.status();
  settings.security = *std::move(security);
  return settings;
}

}  // namespace pst::flags
