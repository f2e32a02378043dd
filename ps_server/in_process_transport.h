// A PsTransport whose ps are in this process (InProcessPs): each call runs
// the ps's own logic (PsNode, so a replicated job's pushes are forwarded to
// the backup) synchronously on the caller's thread. The single-process reference trainer
// uses it, so a model trained "in one process" runs exactly the optimizer,
// validation and partition code the cluster runs, without the network; tests
// run a whole cluster over it and InProcessPsControl, sharing one
// InProcessPs.
#ifndef PST_PS_SERVER_IN_PROCESS_TRANSPORT_H_
#define PST_PS_SERVER_IN_PROCESS_TRANSPORT_H_

#include <memory>
#include <vector>

#include "common/ps_transport.h"
#include "ps_server/in_process_ps.h"
#include "ps_server/store/variable_store.h"

namespace pst::ps {

// Thread-safe (the stores are). A call to a ps that is down fails
// Unavailable (InProcessPs::SetDown).
class InProcessPsTransport final : public common::PsTransport {
 public:
  // `num_ps` ps of its own, which neither save nor restore.
  explicit InProcessPsTransport(int num_ps);
  explicit InProcessPsTransport(std::shared_ptr<InProcessPs> ps);

  // The store of ps `ps` now (after a restart, the new one).
  VariableStore* store(int ps) { return &ps_->server(ps)->store; }

  int num_ps() const override { return ps_->num_ps(); }
  void Pull(int ps, const proto::PullRequest* request, proto::PullResponse* response,
            Done done) override;
  void Push(int ps, const proto::PushRequest* request, proto::PushResponse* response,
            Done done) override;
  void PushPull(int ps, const proto::PushPullRequest* request, proto::PullResponse* response,
                Done done) override;
  void PullRows(int ps, const proto::PullRowsRequest* request, proto::PullRowsResponse* response,
                Done done) override;
  void PushRows(int ps, const proto::PushRowsRequest* request, proto::PushRowsResponse* response,
                Done done) override;
  std::string Describe(int ps) const override;

 private:
  const std::shared_ptr<InProcessPs> ps_;
};

}  // namespace pst::ps

#endif  // PST_PS_SERVER_IN_PROCESS_TRANSPORT_H_
