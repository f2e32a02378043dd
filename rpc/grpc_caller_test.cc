// The role checks the services make on callers named by the per-role
// convention (common/task_identity.h).
#include "rpc/grpc_caller.h"

#include <gtest/gtest.h>

#include "absl/strings/match.h"

namespace pst::rpc {
namespace {

TEST(CallerTest, Unchecked_MayDoEverything) {
  const Caller caller;
  EXPECT_TRUE(RequireChief(caller, "Shutdown").ok());
  EXPECT_TRUE(RequireWorker(caller, 5, "Push").ok());
  EXPECT_TRUE(RequireChiefOrWorker(caller, 2, "Pull").ok());
}

TEST(CallerTest, Chief_MayManageAndPull_ButNotPushAsAWorker) {
  const Caller chief = CallerFromNames({"127.0.0.1", "chief-0.pstrain"});
  EXPECT_TRUE(chief.checked);
  EXPECT_TRUE(RequireChief(chief, "Shutdown").ok());
  EXPECT_TRUE(RequireChiefOrWorker(chief, -1, "Pull").ok());
  EXPECT_TRUE(RequireChiefOrWorker(chief, 1, "Pull").ok());
  EXPECT_EQ(RequireWorker(chief, 0, "Push").code(), absl::StatusCode::kPermissionDenied);
}

TEST(CallerTest, Worker_ActsOnlyAsItself) {
  const Caller worker = CallerFromNames({"worker-1.pstrain"});
  absl::Status shutdown = RequireChief(worker, "Shutdown");
  EXPECT_EQ(shutdown.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(absl::StrContains(shutdown.message(), "Shutdown needs the chief's role"));
  EXPECT_TRUE(absl::StrContains(shutdown.message(), "worker-1.pstrain")) << shutdown;
  EXPECT_TRUE(RequireWorker(worker, 1, "Push").ok());
  EXPECT_EQ(RequireWorker(worker, 0, "Push").code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(RequireWorker(worker, -1, "Push").code(), absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(RequireChiefOrWorker(worker, 1, "Pull").ok());
  EXPECT_TRUE(RequireChiefOrWorker(worker, -1, "Pull").ok());
  EXPECT_EQ(RequireChiefOrWorker(worker, 2, "Pull").code(), absl::StatusCode::kPermissionDenied);
}

TEST(CallerTest, WorkerZeroAlsoChief_MayDoBoth) {
  const Caller both = CallerFromNames({"worker-0.pstrain", "chief-0.pstrain"});
  EXPECT_TRUE(RequireChief(both, "Save").ok());
  EXPECT_TRUE(RequireWorker(both, 0, "Push").ok());
  EXPECT_FALSE(RequireWorker(both, 1, "Push").ok());
}

TEST(CallerTest, NoTaskName_MayDoNothing) {
  const Caller foreign = CallerFromNames({"localhost", "cluster-node"});
  absl::Status status = RequireChiefOrWorker(foreign, -1, "Pull");
  EXPECT_EQ(status.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(absl::StrContains(status.message(), "names no pstrain task")) << status;
  EXPECT_TRUE(absl::StrContains(status.message(), "cluster-node")) << status;
  EXPECT_FALSE(RequireChief(foreign, "Save").ok());
  EXPECT_FALSE(RequireWorker(foreign, 0, "Push").ok());
  EXPECT_FALSE(RequireChief(CallerFromNames({"ps-0.pstrain"}), "Save").ok());
}

}  // namespace
}  // namespace pst::rpc
