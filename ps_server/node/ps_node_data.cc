// PsNode's data plane (ps_node.h): each change to the store goes through
// the ReplicaSource, which keeps the backup, if any, in step.
#include <string>
#include <utility>

#include "common/status_macros.h"
#include "ps_server/node/call_join.h"
#include "ps_server/node/ps_node.h"

namespace pst::ps {
namespace {

// `request` with its gradients' bytes in the tensors (a push applied from
// gRPC's receive buffer carries them in `payloads`), for the backup.
proto::PushRequest ForwardedPush(const proto::PushRequest& request,
                                 const VariableStore::Payloads* payloads) {
  proto::PushRequest copy = request;
  if (payloads == nullptr) return copy;
  for (int k = 0; k < copy.gradients_size() && k < static_cast<int>(payloads->size()); ++k) {
    std::string* data = copy.mutable_gradients(k)->mutable_data();
    size_t bytes = 0;
    for (std::string_view part : (*payloads)[k]) bytes += part.size();
    data->clear();
    data->reserve(bytes);
    for (std::string_view part : (*payloads)[k]) data->append(part);
  }
  return copy;
}

}  // namespace

namespace {

const std::string& FirstName(const google::protobuf::RepeatedPtrField<std::string>& names) {
  static const std::string* const kNone = new std::string;
  return names.empty() ? *kNone : names[0];
}

const std::string& FirstName(const google::protobuf::RepeatedPtrField<proto::RowIds>& rows) {
  static const std::string* const kNone = new std::string;
  return rows.empty() ? *kNone : rows[0].name();
}

}  // namespace

void PsNode::Push(const proto::PushRequest* request, const VariableStore::Payloads* payloads,
                  proto::PushResponse* response, Done done) {
  std::shared_ptr<Primary> p = PrimaryFor(FirstName(request->names()));
  p->source->Change(
      [&](proto::ReplicateRequest* change) -> absl::Status {
        PST_RETURN_IF_ERROR(p->store->Push(*request, response, payloads));
        p->source->NotePushServed();
        if (!response->duplicate() && p->source->forwarding()) {
          *change->mutable_push() = ForwardedPush(*request, payloads);
        }
        return absl::OkStatus();
      },
      std::move(done));
}

uint64_t PsNode::PushPull(const proto::PushPullRequest* request,
                          const VariableStore::Payloads* payloads, proto::PullResponse* response,
                          Done done, std::shared_ptr<VariableStore>* parked_in) {
  std::shared_ptr<Primary> p = PrimaryFor(FirstName(request->push().names()));
  if (parked_in != nullptr) *parked_in = p->store;
  // A shard never replicated (a job without --ps_replicas=2) goes
  // straight to the store; any other through its source, which may start
  // forwarding at any time (a resync) and must miss no change.
  if (!p->source->has_backup() && !p->promoted) {
    return p->store->PushPullWhenReady(request, response, std::move(done), payloads);
  }
  // Through the source: to forward the push, or (promoted) to note the
  // first push served.
  // Two parts: the push forwarded to the backup, and the pull of its answer.
  auto join = std::make_shared<CallJoin>(2, std::move(done));
  uint64_t ticket = 0;
  p->source->Change(
      [&](proto::ReplicateRequest* change) -> absl::Status {
        bool applied = false;
        ticket = p->store->PushPullWhenReady(
            request, response, [join](absl::Status s) { join->Part(std::move(s)); }, payloads,
            &applied);
        // Not applied: the store already answered the pull part with why.
        if (!applied) return join->first_error();
        p->source->NotePushServed();
        if (p->source->forwarding()) {
          *change->mutable_push() = ForwardedPush(request->push(), payloads);
        }
        return absl::OkStatus();
      },
      [join](absl::Status s) { join->Part(std::move(s)); });
  return ticket;
}

void PsNode::PushRows(const proto::PushRowsRequest* request, proto::PushRowsResponse* response,
                      Done done) {
  std::shared_ptr<Primary> p = PrimaryFor(FirstName(request->rows()));
  p->source->Change(
      [&](proto::ReplicateRequest* change) -> absl::Status {
        PST_RETURN_IF_ERROR(p->store->PushRows(*request, response));
        p->source->NotePushServed();
        if (p->source->forwarding()) *change->mutable_push_rows() = *request;
        return absl::OkStatus();
      },
      std::move(done));
}

void PsNode::PullRows(const proto::PullRowsRequest* request, proto::PullRowsResponse* response,
                      Done done) {
  std::shared_ptr<Primary> p = PrimaryFor(FirstName(request->rows()));
  if ((!p->source->has_backup() && !p->promoted) || !p->store->PullMayChangeRows(*request)) {
    done(p->store->PullRows(*request, response));
    return;
  }
  p->source->Change(
      [&](proto::ReplicateRequest* change) -> absl::Status {
        PST_RETURN_IF_ERROR(p->store->PullRows(*request, response));
        *change->mutable_pull_rows() = *request;
        return absl::OkStatus();
      },
      std::move(done));
}

}  // namespace pst::ps
