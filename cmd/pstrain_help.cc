#include "cmd/pstrain_help.h"

#include <cstdio>

#include "absl/flags/reflection.h"

namespace pst::cli {
namespace {

// Each subcommand: its usage lines (the general usage is all of them) and
// the flags it reads, for `pstrain SUBCOMMAND --help`.
struct Subcommand {
  const char* name;
  const char* usage;
  std::vector<const char*> flags;
  const char* more_flags;  // flags too many to list, or nullptr
};

// clang-format off
const Subcommand kSubcommands[] = {
    {"local",
     "  pstrain local [--ps=2] [--workers=2] [--chief=true] [--model=mlp|wide_deep|logreg]\n"
     "                [--epochs=3] [--batch_size=64] [--optimizer=adam] [--learning_rate=0.001]\n"
     "                [--data=FILE|generate[:rows=N,vocab=V,seed=S]] [--summary_json=PATH]\n"
     "                [--worker_command=CMD] [--evaluator | --evaluator_command=CMD] ...\n"
     "      Runs a whole cluster on this machine and trains the model.\n",
     {"ps", "workers", "chief", "host", "timeout_s", "grace_s", "slow_worker",
      "slow_worker_delay_ms", "ps_link_rate", "restart_failed", "max_restarts", "worker_command",
      "evaluator",
      "evaluator_command", "metrics_port", "summary_json", "progress"},
     "every job flag, forwarded to the daemons (docs/flags.md; 'pstrain --helpfull')"},
    {"plan",
     "  pstrain plan [--tf_config=JSON|@FILE | --ps=N] [model flags]\n"
     "      Prints the placement plan: every variable and partition, its ps, bytes per ps.\n",
     {"tf_config", "ps", "model", "hidden", "placement", "ps_replicas", "partitioner",
      "num_shards", "min_slice_bytes", "max_partitions", "max_shard_bytes", "dense_piece_bytes"},
     "the other model flags (docs/flags.md; 'pstrain --helpfull')"},
    {"reference",
     "  pstrain reference [model flags]\n"
     "      Trains the same model in one process (in-process ps) and prints its metrics.\n",
     {"ps", "model", "data", "data_dir", "epochs", "batch_size", "summary_json"},
     "the other model flags (docs/flags.md; 'pstrain --helpfull')"},
    {"generate_criteo",
     "  pstrain generate_criteo --out=PATH [--rows=N] [--vocab=V] [--seed=S] [--churn=F]\n"
     "      Writes synthetic Criteo-format data and prints its best achievable AUC.\n",
     {"out", "rows", "vocab", "seed", "churn"}, nullptr},
    {"generate_libsvm",
     "  pstrain generate_libsvm --out=PATH [--rows=N] [--features=F] [--seed=S]\n"
     "      Writes synthetic libsvm data from a hidden sparse logistic model and prints its\n"
     "      best achievable AUC (over all rows and over the held-out last 10%).\n",
     {"out", "rows", "features", "seed"}, nullptr},
    {"checkpoint",
     "  pstrain checkpoint inspect DIR\n"
     "      Lists a checkpoint's (or every checkpoint's in a root) step, variables and sizes,\n"
     "      and verifies every checksum; exits 1 if any is corrupt.\n"
     "  pstrain checkpoint export [--format=safetensors] [--include_slots] DIR OUT\n"
     "      Writes a checkpoint (DIR, or the newest valid one in a root) as one file with\n"
     "      partitions merged into whole tensors, for use outside pstrain.\n",
     {"format", "include_slots"}, nullptr},
    {"tfconfig",
     "  pstrain tfconfig --ps_hosts=H1,H2 --worker_hosts=H3,H4 [--chief_hosts=H0]\n"
     "                   [--task_type=worker] [--task_index=0] [--port=2222]\n"
     "      Prints the TF_CONFIG of one task (hosts without a port get --port), validated as\n"
     "      the daemons validate it.\n",
     {"chief_hosts", "ps_hosts", "worker_hosts", "evaluator_hosts", "task_type", "task_index",
      "port"}, nullptr},
    {"check",
     "  pstrain check [--tf_config=JSON|@FILE] [--wait_s=0]\n"
     "      Preflight for this machine's task: TF_CONFIG valid, its host is this machine,\n"
     "      its port free, every host resolves; with --wait_s, the ps and chief answer.\n",
     {"tf_config", "wait_s", "tls_cert", "tls_key", "tls_ca", "tls_server_name",
      "auth_token_file"}, nullptr},
    {"health",
     "  pstrain health HOST:PORT [--timeout_s=5]\n"
     "      Asks a ps or chief's grpc.health.v1 service; exits 0 when it is SERVING.\n",
     {"timeout_s", "tls_cert", "tls_key", "tls_ca", "tls_server_name", "auth_token_file"},
     nullptr},
    {"devices",
     "  pstrain devices [--device=auto] [--gpus=1,2] [--virtual_devices=N] [--gpu_memory=...]\n"
     "      Lists the physical GPUs (allocating no GPU memory) and the logical devices a\n"
     "      worker would use with these flags.\n",
     {"device", "gpus", "gpu_memory", "virtual_devices", "cpu_devices"}, nullptr},
};
// clang-format on

}  // namespace

std::string Usage() {
  std::string usage = "pstrain: parameter-server training.\n\n";
  for (const Subcommand& sub : kSubcommands) usage += sub.usage;
  usage +=
      "\n"
      "Run 'pstrain SUBCOMMAND --help' for a subcommand's flags, 'pstrain --helpfull' for "
      "every flag.";
  return usage;
}

// `pstrain SUBCOMMAND --help`: its usage and its flags, each with its
// default and help. False for no subcommand or an unknown one (Abseil's
// --help, with the general usage, then).
bool PrintSubcommandHelp(const std::vector<std::string>& positional) {
  if (positional.size() < 2) return false;
  for (const Subcommand& sub : kSubcommands) {
    if (positional[1] != sub.name) continue;
    std::printf("usage:\n%s\nflags:\n", sub.usage);
    for (const char* name : sub.flags) {
      const absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
      if (flag == nullptr) continue;
      std::printf("  --%s (default: %s)\n      %s\n", name,
                  flag->DefaultValue().empty() ? "\"\"" : flag->DefaultValue().c_str(),
                  flag->Help().c_str());
    }
    if (sub.more_flags != nullptr) std::printf("  and %s\n", sub.more_flags);
    return true;
  }
  return false;
}

}  // namespace pst::cli
