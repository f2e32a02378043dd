// The per-role naming convention: task names in certificates, parsed into
// roles; names that do not follow it give no role.
#include "common/task_identity.h"

#include <gtest/gtest.h>


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

}  // namespace
}  // namespace pst::common
