// Parameter servers in this process: each a VariableStore with its PsNode
// (the control logic) and an incarnation, as a ps_server daemon holds them.
// The data transport (in_process_transport.h) and the control
// (in_process_control.h) made over one InProcessPs reach the same ps, so a
// test has one set of P ps serving both planes.
//
// A test loses a ps the ways a real one is lost: Restart(i) replaces it by a
// fresh one (no variables, a new incarnation), as a ps killed and started
// again; SetDown(i, true) makes every call to it fail Unavailable, as a ps
// that does not answer, until SetDown(i, false).
//
// Thread-safe.
#ifndef PST_PS_SERVER_IN_PROCESS_PS_H_
#define PST_PS_SERVER_IN_PROCESS_PS_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/process.h"
#include "ps_server/node/ps_node.h"
#include "ps_server/store/variable_store.h"

namespace pst::ps {

class InProcessPs {
 public:
  struct Options {
    // Where the ps save and restore checkpoints ("": they refuse to).
    std::string checkpoint_dir;
    VariableStore::Options store;
  };

  // One ps. Alive as long as the InProcessPs, restarted or not. In a
  // replicated job it forwards to the others of `ps` in this process.
  struct Server {
    Server(const InProcessPs* ps, int index, uint64_t incarnation, const Options& options);
    VariableStore store;
    PsNode node;
    common::StopSignal shutdown;  // stopped by a Shutdown call
  };

  explicit InProcessPs(int num_ps, Options options = Options());
  ~InProcessPs();
  InProcessPs(const InProcessPs&) = delete;
  InProcessPs& operator=(const InProcessPs&) = delete;

  int num_ps() const { return num_ps_; }

  // The ps now at `index` (after a restart, the new one). Errors:
  // Unavailable while it is down. REQUIRES (every method): 0 <= index <
  // num_ps().
  absl::StatusOr<Server*> Get(int index) const;
  // The ps now at `index`, down or not.
  Server* server(int index) const;

  // Kills ps `index` and starts a fresh one in its place, with no variables
  // and the next incarnation. Calls parked in the old one are answered
  // Unavailable; saves and restores running there finish on the old store,
  // which nothing reaches any more.
  void Restart(int index);
  void SetDown(int index, bool down);

  // Incarnation of the ps started `restarts` times before at `index`:
  // 1000 * (restarts + 1) + index, so tests can tell them apart.
  static uint64_t IncarnationOf(int index, int restarts);

 private:
  const int num_ps_;
  const Options options_;
  mutable absl::Mutex mu_;
  std::vector<std::unique_ptr<Server>> servers_ ABSL_GUARDED_BY(mu_);
  std::vector<int> restarts_ ABSL_GUARDED_BY(mu_);
  std::vector<bool> down_ ABSL_GUARDED_BY(mu_);
  // Replaced servers, kept until this goes: a call that reached one before
  // the restart still finishes on it.
  std::vector<std::unique_ptr<Server>> retired_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pst::ps

#endif  // PST_PS_SERVER_IN_PROCESS_PS_H_
