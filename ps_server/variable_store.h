// The variables one ps holds, and the logic of every data-plane request:
// create, pull, push (apply the optimizer), with full validation.
//
// A request is checked completely before any state changes: a push with one
// bad gradient among ten applies none of them.
//
// Thread-safety: all methods are safe to call concurrently. The name->variable
// map is guarded by mu_; each variable's values by its own mutex, so pushes
// to different variables proceed in parallel. Pushes to the same variable are
// applied one at a time, each atomically (async mode: a pull sees a variable
// before or after a push, never half of one).
#ifndef PST_PS_SERVER_VARIABLE_STORE_H_
#define PST_PS_SERVER_VARIABLE_STORE_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "proto/pstrain.pb.h"
#include "ps_server/optimizer.h"

namespace pst::ps {

class VariableStore {
 public:
  struct Options {
    // Largest variable accepted, in elements (default 4 Gi floats = 16 GiB).
    int64_t max_variable_elements = int64_t{1} << 32;
  };

  VariableStore() : VariableStore(Options()) {}
  explicit VariableStore(Options options);

  // Creates and initializes the variables, all or nothing. A variable that
  // already exists with an identical spec is left as it is (the call is
  // idempotent, so a restarted chief can repeat it). Returns how many were
  // new.
  // Errors: InvalidArgument for a bad spec, initializer or optimizer, or a
  // name repeated in the request; AlreadyExists for a name that exists with
  // a different spec; FailedPrecondition if the optimizer differs from the
  // one the store was first created with.
  absl::StatusOr<int> Create(const proto::CreateVariablesRequest& request);

  // Copies the named variables (all, if `names` is empty, sorted by name).
  // Errors: NotFound for an unknown name.
  absl::Status Pull(const google::protobuf::RepeatedPtrField<std::string>& names,
                    proto::PullResponse* response) const;

  // Applies each gradient with the optimizer.
  // Errors: InvalidArgument if names and gradients differ in count, a name
  // repeats, a gradient's dtype/shape/size does not match its variable, or
  // a gradient holds NaN or Inf; NotFound for an unknown variable. On any
  // error nothing is applied.
  absl::Status Push(const proto::PushRequest& request, proto::PushResponse* response);

  struct Stats {
    int num_variables = 0;
    int64_t num_elements = 0;
    int64_t pushes_applied = 0;
  };
  Stats GetStats() const;

 private:
  struct Variable {
    explicit Variable(proto::VariableSpec s) : spec(std::move(s)) {}
    const proto::VariableSpec spec;
    mutable absl::Mutex mu;
    std::vector<float> values ABSL_GUARDED_BY(mu);
    std::vector<std::vector<float>> slots ABSL_GUARDED_BY(mu);
    int64_t version ABSL_GUARDED_BY(mu) = 0;
  };

  absl::StatusOr<Variable*> Find(const std::string& name) const ABSL_SHARED_LOCKS_REQUIRED(mu_);

  const Options options_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::unique_ptr<Variable>> variables_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<Optimizer> optimizer_ ABSL_GUARDED_BY(mu_);
  proto::OptimizerConfig optimizer_config_ ABSL_GUARDED_BY(mu_);
  std::atomic<int64_t> pushes_applied_{0};
};

}  // namespace pst::ps

#endif  // PST_PS_SERVER_VARIABLE_STORE_H_
