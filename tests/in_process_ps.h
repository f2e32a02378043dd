// A model's variables on in-process ps (real VariableStores behind the
// in-process transport; the test links the ps) and a client to them: what
// the tests that run a model's Train and Evaluate in one process share.
#ifndef PST_TESTS_IN_PROCESS_PS_H_
#define PST_TESTS_IN_PROCESS_PS_H_

#include <gtest/gtest.h>

#include <memory>

#include "client/ps_client.h"
#include "models/model_spec.h"
#include "proto/pstrain.pb.h"
#include "ps_server/in_process_transport.h"

namespace pst::testing {

// `num_ps` in-process ps holding the variables of `training`'s model, made
// as the chief makes them, and worker 0's client to them.
inline std::unique_ptr<client::PsClient> InProcessModelCluster(
    const proto::TrainingConfig& training, int num_ps) {
  absl::StatusOr<proto::PlacementPlan> plan = models::BuildPlan(training, num_ps);
  EXPECT_TRUE(plan.ok()) << plan.status();
  if (!plan.ok()) return nullptr;
  auto transport = std::make_shared<ps::InProcessPsTransport>(num_ps);
  for (int p = 0; p < num_ps; ++p) {
    proto::CreateVariablesRequest request;
    *request.mutable_optimizer() = training.optimizer();
    for (const auto& entry : plan->variables()) {
      if (entry.ps_index() == p) *request.add_variables() = entry.spec();
    }
    EXPECT_TRUE(transport->store(p)->Create(request).ok());
  }
  absl::StatusOr<std::unique_ptr<client::PsClient>> client = client::PsClient::Create(
      *plan, models::DenseNames(*models::ModelVariables(training)), transport,
      /*worker_index=*/0, 1);
  EXPECT_TRUE(client.ok()) << client.status();
  return client.ok() ? *std::move(client) : nullptr;
}

}  // namespace pst::testing

#endif  // PST_TESTS_IN_PROCESS_PS_H_
