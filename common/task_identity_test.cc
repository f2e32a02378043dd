// The per-role naming convention: task names in certificates, parsed into
// roles; names that do not follow it give no role; and the role checks the
// services make (grpc_caller.h) on callers named that way.
#include "common/task_identity.h"

#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "common/grpc_caller.h"

namespace pst::common {
namespace {

TEST(TaskIdentityTest, GoodNames_GiveTheirTask) {
  struct Case {
    std::string name;
    TaskType type;
    int index;
  } cases[] = {
      {"chief-0.pstrain", TaskType::kChief, 0},
      {"ps-1.pstrain", TaskType::kPs, 1},
      {"worker-3.pstrain", TaskType::kWorker, 3},
      {"worker-120.pstrain", TaskType::kWorker, 120},
      {"evaluator-0.pstrain", TaskType::kEvaluator, 0},
  };
  for (const Case& c : cases) {
    std::optional<TaskIdentity> task = ParseTaskName(c.name);
    ASSERT_TRUE(task.has_value()) << c.name;
    EXPECT_EQ(task->type, c.type) << c.name;
    EXPECT_EQ(task->index, c.index) << c.name;
    EXPECT_EQ(TaskName(*task), c.name);
  }
}

TEST(TaskIdentityTest, BadNames_GiveNoTask) {
  for (const char* name : {"",
                           "worker-3",
                           "worker-3.pstrain.",
                           "worker-3.pstrain.evil.com",
                           "worker-.pstrain",
                           "worker--3.pstrain",
                           "worker-+3.pstrain",
                           "worker-03.pstrain",
                           "worker-3a.pstrain",
                           "Worker-3.pstrain",
                           "master-0.pstrain",
                           "boss-0.pstrain",
                           "worker3.pstrain",
                           "-3.pstrain",
                           "worker-9999999.pstrain",
                           "localhost",
                           "127.0.0.1",
                           "cluster-node",
                           "chief-0.pstrain\n",
                           "x.worker-1.pstrain"}) {
    EXPECT_FALSE(ParseTaskName(name).has_value()) << "'" << name << "'";
  }
}

TEST(TaskIdentityTest, TasksAmong_KeepsTaskNamesOnceInOrder) {
  const std::vector<TaskIdentity> tasks = TasksAmong(
      {"localhost", "127.0.0.1", "worker-0.pstrain", "chief-0.pstrain", "worker-0.pstrain"});
  ASSERT_EQ(tasks.size(), 2u);
  EXPECT_EQ(TaskName(tasks[0]), "worker-0.pstrain");
  EXPECT_EQ(TaskName(tasks[1]), "chief-0.pstrain");
  EXPECT_TRUE(TasksAmong({"localhost", "cluster-node"}).empty());
}

TEST(TaskIdentityTest, UnreadableCertificate_NamesNoTask) {
  EXPECT_TRUE(TasksInCertificate("").empty());
  EXPECT_TRUE(
      TasksInCertificate("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n").empty());
}

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
}  // namespace pst::common
