#!/usr/bin/python3
"""Runs check_layers.py on small trees built in a temporary directory.

  /usr/bin/python3 tests/layers/check_layers_test.py
"""

import os
import subprocess
import sys
import tempfile
import textwrap
import unittest

CHECKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "check_layers.py")

DOC = """\
# Architecture

## Layers

<!-- layers-table -->
```
1  proto/                 wire types
2  common/                shared code
3  client/  data/         the client, the data readers
4  server/                the daemon
5  cmd/  tests/           every main (cmd/ may not exist yet), the tests
```

<!-- layers-rule: no-grpc common/ data/ -->
<!-- layers-rule: flags-only-in cmd/ -->

## Next section
"""

# A tree that follows DOC.
CLEAN = {
    "docs/architecture.md": DOC,
    "proto/wire.pb.h": "// generated\n",
    "common/status.h": '#include "proto/wire.pb.h"\n#include "absl/status/status.h"\n',
    "common/status.cc": '#include "common/status.h"\n#include <string>\n',
    "client/client.h": '#include "common/status.h"\n#include "proto/wire.pb.h"\n',
    "client/client_test.cc": '#include "client/client.h"\n#include "gtest/gtest.h"\n',
    "data/reader.h": '#include "common/status.h"\n',
    "server/server.h": '#include "client/client.h"\n#include "data/reader.h"\n',
    "tests/cluster_test.cc": '#include "server/server.h"\n#include "nlohmann/json.hpp"\n',
    "CMakeLists.txt": textwrap.dedent("""\
        add_library(pst_warnings INTERFACE)
        add_subdirectory(common)
        """),
    "common/CMakeLists.txt": textwrap.dedent("""\
        add_library(pst_common STATIC status.cc)
        target_link_libraries(pst_common PUBLIC absl::status PRIVATE pst_warnings)
        """),
    "client/CMakeLists.txt": textwrap.dedent("""\
        add_library(pst_client STATIC client.cc)
        target_link_libraries(pst_client PUBLIC pst_common)
        foreach(t client)
          add_executable(${t}_test ${t}_test.cc)
          target_link_libraries(${t}_test PRIVATE pst_client GTest::gtest_main)
        endforeach()
        """),
    "server/CMakeLists.txt": textwrap.dedent("""\
        add_library(pst_server STATIC server.cc)
        target_link_libraries(pst_server
          PUBLIC pst_client  # the client
          PRIVATE pst_common pst_warnings)
        """),
}


class CheckLayersTest(unittest.TestCase):

    def run_checker(self, changes, git=False):
        """Writes CLEAN with `changes` (path -> text, or None to delete) into a
        temporary directory (a git work tree if `git`) and runs the checker
        there: (exit status, output)."""
        files = dict(CLEAN)
        files.update(changes)
        with tempfile.TemporaryDirectory(prefix="check-layers-") as root:
            for path, text in files.items():
                if text is None:
                    continue
                full = os.path.join(root, path)
                os.makedirs(os.path.dirname(full), exist_ok=True)
                with open(full, "w", encoding="utf-8") as f:
                    f.write(text)
            if git:
                subprocess.run(["git", "init", "-q", root], check=True, capture_output=True)
            done = subprocess.run([sys.executable, CHECKER, "--root", root],
                                  capture_output=True, text=True, timeout=60)
        return done.returncode, done.stdout + done.stderr

    def test_CleanTree_Passes(self):
        status, out = self.run_checker({})
        self.assertEqual(status, 0, out)
        self.assertIn("0 errors", out)

    def test_IncludeOfRowBelow_FailsNamingFileAndLine(self):
        status, out = self.run_checker({
            "common/status.cc": '#include "common/status.h"\n\n#include "server/server.h"\n'})
        self.assertEqual(status, 1, out)
        self.assertIn("common/status.cc:3: common/ (row 2) includes server/ (row 4)", out)

    def test_IncludeOfFolderBeside_Fails(self):
        status, out = self.run_checker({
            "data/reader.h": '#include "common/status.h"\n#include "client/client.h"\n'})
        self.assertEqual(status, 1, out)
        self.assertIn("data/reader.h:2: data/ (row 3) includes client/ (row 3)", out)
        self.assertIn("beside", out)

    def test_TestFile_IsHeldToTheSameRule(self):
        status, out = self.run_checker({
            "client/client_test.cc": '#include "client/client.h"\n#include "server/server.h"\n'})
        self.assertEqual(status, 1, out)
        self.assertIn("client/client_test.cc:2: client/ (row 3) includes server/ (row 4)", out)

    def test_CmakeLinkOfRowBelow_FailsNamingTheLine(self):
        status, out = self.run_checker({
            "common/CMakeLists.txt": textwrap.dedent("""\
                add_library(pst_common STATIC status.cc)
                target_link_libraries(pst_common
                  PUBLIC absl::status
                  PRIVATE pst_warnings pst_server)
                """)})
        self.assertEqual(status, 1, out)
        self.assertIn("common/CMakeLists.txt:4: target pst_common (folder common/, row 2) "
                      "links pst_server (folder server/, row 4)", out)

    def test_CmakeLinkInForeach_FailsNamingTheExpandedTarget(self):
        status, out = self.run_checker({
            "client/CMakeLists.txt": CLEAN["client/CMakeLists.txt"].replace(
                "PRIVATE pst_client", "PRIVATE pst_client pst_server")})
        self.assertEqual(status, 1, out)
        self.assertIn("client/CMakeLists.txt:5: target client_test (folder client/, row 3) "
                      "links pst_server", out)

    def test_CmakeBackEdge_FailsNamingFileLineTargetsAndRows(self):
        status, out = self.run_checker({
            "client/CMakeLists.txt": CLEAN["client/CMakeLists.txt"].replace(
                "PUBLIC pst_common", "PUBLIC pst_common\n  PRIVATE pst_server")})
        self.assertEqual(status, 1, out)
        self.assertIn("client/CMakeLists.txt:3: target pst_client (folder client/, row 3) "
                      "links pst_server (folder server/, row 4): server/ is below client/", out)
        self.assertIn("1 errors", out)

    def test_CmakeLinkBeside_Fails(self):
        status, out = self.run_checker({
            "data/CMakeLists.txt": "add_library(pst_data STATIC reader.cc)\n"
                                   "target_link_libraries(pst_data PUBLIC pst_common\n"
                                   "                      pst_client)\n"})
        self.assertEqual(status, 1, out)
        self.assertIn("data/CMakeLists.txt:3: target pst_data (folder data/, row 3) links "
                      "pst_client (folder client/, row 3): client/ is beside data/ on row 3", out)

    def test_CmakeMultiLineCall_NamesTheLinkedNamesLineAndSkipsComments(self):
        status, out = self.run_checker({
            "client/CMakeLists.txt": textwrap.dedent("""\
                add_library(pst_client STATIC client.cc)
                target_link_libraries(
                  pst_client  # not pst_server: it is below
                  PUBLIC
                    pst_common
                    absl::status  # pst_server, in a comment
                  PRIVATE
                    pst_warnings
                    pst_server
                )
                """)})
        self.assertEqual(status, 1, out)
        self.assertIn("client/CMakeLists.txt:9: target pst_client (folder client/, row 3) "
                      "links pst_server (folder server/, row 4)", out)
        self.assertEqual(out.count("links pst_server"), 1, out)

    def test_CmakeForeachOverAVariable_ChecksEachTarget(self):
        status, out = self.run_checker({
            "common/CMakeLists.txt": CLEAN["common/CMakeLists.txt"] + textwrap.dedent("""\
                set(PST_TESTS status)
                list(APPEND PST_TESTS tensor)
                foreach(t IN LISTS PST_TESTS)
                  add_executable(${t}_test ${t}_test.cc)
                  target_link_libraries(${t}_test PRIVATE pst_common
                                        pst_server GTest::gtest_main)
                endforeach()
                """)})
        self.assertEqual(status, 1, out)
        self.assertIn("common/CMakeLists.txt:8: target status_test (folder common/, row 2) "
                      "links pst_server (folder server/, row 4)", out)
        self.assertIn("common/CMakeLists.txt:8: target tensor_test (folder common/, row 2)", out)

    def test_CmakeForeachOverUnknownItems_TargetsStillBelongToTheFolder(self):
        # file(GLOB) is not followed: the body runs once with ${t} as it is.
        status, out = self.run_checker({
            "common/CMakeLists.txt": CLEAN["common/CMakeLists.txt"] + textwrap.dedent("""\
                file(GLOB PST_TEST_SOURCES *_test.cc)
                foreach(t ${PST_TEST_SOURCES})
                  add_executable(${t}_test ${t})
                  target_link_libraries(${t}_test PRIVATE pst_common pst_client)
                endforeach()
                """)})
        self.assertEqual(status, 1, out)
        self.assertIn("common/CMakeLists.txt:6: target ${t}_test (folder common/, row 2) "
                      "links pst_client (folder client/, row 3)", out)

    def test_CmakeLinkThroughVariableOrGeneratorExpression_IsChecked(self):
        status, out = self.run_checker({
            "common/CMakeLists.txt": textwrap.dedent("""\
                add_library(pst_common STATIC status.cc)
                set(PST_EXTRA pst_client)
                target_link_libraries(pst_common PRIVATE ${PST_EXTRA}
                                      "$<$<BOOL:${X}>:pst_server>" ${CMAKE_DL_LIBS})
                """)})
        self.assertEqual(status, 1, out)
        self.assertIn("common/CMakeLists.txt:3: target pst_common (folder common/, row 2) "
                      "links pst_client", out)
        self.assertIn("common/CMakeLists.txt:4: target pst_common (folder common/, row 2) "
                      "links pst_server", out)

    def test_CmakeLinkIntoASubfolder_CountsAsItsParentFromOutside(self):
        doc = DOC.replace("4  server/                the daemon",
                          "4  server/store/          the store\n5  server/  data2/  the daemon")
        doc = doc.replace("5  cmd/", "6  cmd/")
        files = {
            "docs/architecture.md": doc,
            "server/store/CMakeLists.txt": "add_library(pst_store STATIC store.cc)\n"
                                           "target_link_libraries(pst_store PUBLIC pst_common)\n",
            "server/CMakeLists.txt": CLEAN["server/CMakeLists.txt"].replace(
                "PUBLIC pst_client", "PUBLIC pst_client pst_store"),
            "tests/CMakeLists.txt": "add_executable(store_test store_test.cc)\n"
                                    "target_link_libraries(store_test PRIVATE pst_store)\n",
        }
        status, out = self.run_checker(files)
        self.assertEqual(status, 0, out)
        files["data2/CMakeLists.txt"] = ("add_library(pst_data2 STATIC x.cc)\n"
                                         "target_link_libraries(pst_data2 PRIVATE pst_store)\n")
        files["server/store/CMakeLists.txt"] += \
            "target_link_libraries(pst_store PRIVATE pst_server)\n"
        status, out = self.run_checker(files)
        self.assertEqual(status, 1, out)
        self.assertIn("data2/CMakeLists.txt:2: target pst_data2 (folder data2/, row 5) links "
                      "pst_store (folder server/store/, row 4): server/ is beside data2/ on "
                      "row 5", out)
        self.assertIn("server/store/CMakeLists.txt:3: target pst_store (folder server/store/, "
                      "row 4) links pst_server (folder server/, row 5): server/ is below "
                      "server/store/", out)

    def test_CmakeLinkOfAnAlias_IsCheckedAsItsTarget(self):
        status, out = self.run_checker({
            "server/CMakeLists.txt": CLEAN["server/CMakeLists.txt"] +
                "add_library(pst::server ALIAS pst_server)\n",
            "common/CMakeLists.txt": "add_library(pst_common STATIC status.cc)\n"
                                     "target_link_libraries(pst_common PRIVATE pst::server)\n"})
        self.assertEqual(status, 1, out)
        self.assertIn("common/CMakeLists.txt:2: target pst_common (folder common/, row 2) "
                      "links pst_server (folder server/, row 4)", out)

    def test_CmakeNamesNotOurs_AreNotChecked_ButAnUnknownPstNameFails(self):
        status, out = self.run_checker({
            "common/CMakeLists.txt": textwrap.dedent("""\
                add_library(pst_common STATIC status.cc)
                target_link_libraries(pst_common PUBLIC absl::status absl::statusor
                  PRIVATE BLAS::BLAS ZLIB::ZLIB Threads::Threads server pst_warnings)
                """),
            "server/CMakeLists.txt": CLEAN["server/CMakeLists.txt"] +
                "target_link_libraries(pst_server PRIVATE pst_serverr)\n"})
        self.assertEqual(status, 1, out)
        self.assertIn("server/CMakeLists.txt:5: target pst_server links pst_serverr, which no "
                      "CMakeLists.txt makes", out)
        self.assertIn("1 errors", out)

    def test_CmakeLibraryAtTheTopLevel_Fails(self):
        status, out = self.run_checker({
            "CMakeLists.txt": CLEAN["CMakeLists.txt"] + "add_library(pst_misc STATIC misc.cc)\n"})
        self.assertEqual(status, 1, out)
        self.assertIn("CMakeLists.txt:3: library pst_misc is made in the top-level "
                      "CMakeLists.txt, which has no row", out)

    def test_CmakeInBuildOrGitIgnoredFolders_IsSkipped(self):
        back_edge = "add_library(pst_gen STATIC gen.cc)\n" \
                    "target_link_libraries(pst_gen PRIVATE pst_server)\n"
        status, out = self.run_checker({
            ".gitignore": "generated/\n",
            "generated/CMakeLists.txt": back_edge,
            "build/common/CMakeLists.txt": back_edge,
            "build-asan/CMakeLists.txt": back_edge}, git=True)
        self.assertEqual(status, 0, out)
        status, out = self.run_checker({"generated/CMakeLists.txt": back_edge}, git=True)
        self.assertEqual(status, 1, out)
        self.assertIn("folder generated/ holds a CMakeLists.txt but is not in the Layers table",
                      out)

    def test_CmakeGrpcLinkInAGrpcFreeFolder_FailsNamingFileAndLine(self):
        status, out = self.run_checker({
            "common/CMakeLists.txt": textwrap.dedent("""\
                add_library(pst_common STATIC status.cc)
                target_link_libraries(pst_common
                  PUBLIC absl::status gRPC::grpc++)
                add_executable(status_test status_test.cc)
                target_link_libraries(status_test PRIVATE pst_common)
                """)})
        self.assertEqual(status, 1, out)
        self.assertIn("common/CMakeLists.txt:3: target pst_common (folder common/) links gRPC "
                      "(gRPC::grpc++): targets under common/ are gRPC-free", out)
        # Its test links gRPC through it: pst_common's own link is the one to fix.
        self.assertEqual(out.count("gRPC-free"), 1, out)

    def test_CmakeLinkOfALibraryThatBringsGrpc_Fails(self):
        proto = textwrap.dedent("""\
            add_library(pst_proto STATIC wire.pb.cc)
            add_library(pst_proto_grpc STATIC wire.grpc.pb.cc)
            target_link_libraries(pst_proto_grpc PUBLIC pst_proto gRPC::grpc++)
            add_library(pst_services STATIC services.cc)
            target_link_libraries(pst_services PUBLIC pst_proto_grpc)
            """)
        # client/ is not gRPC-free: it may link them.
        client = CLEAN["client/CMakeLists.txt"].replace("PUBLIC pst_common",
                                                        "PUBLIC pst_common pst_services")
        status, out = self.run_checker({"proto/CMakeLists.txt": proto,
                                        "client/CMakeLists.txt": client})
        self.assertEqual(status, 0, out)
        status, out = self.run_checker({
            "proto/CMakeLists.txt": proto,
            "client/CMakeLists.txt": client,
            "data/CMakeLists.txt": "add_library(pst_data STATIC reader.cc)\n"
                                   "target_link_libraries(pst_data PUBLIC pst_common\n"
                                   "                      pst_services)\n"})
        self.assertEqual(status, 1, out)
        self.assertIn("data/CMakeLists.txt:3: target pst_data (folder data/) links gRPC "
                      "(pst_services -> pst_proto_grpc -> gRPC::grpc++): targets under data/ "
                      "are gRPC-free", out)

    def test_CmakeGrpcLinkException_IsANote(self):
        status, out = self.run_checker({
            "common/CMakeLists.txt": "add_library(pst_common STATIC status.cc)\n"
                                     "target_link_libraries(pst_common PUBLIC gRPC::grpc++)\n",
            "tests/layers/exceptions.txt": "pst_common -> gRPC   # moves to rpc/ (item 9)\n"})
        self.assertEqual(status, 0, out)
        self.assertIn("note: common/CMakeLists.txt:2: target pst_common (folder common/) links "
                      "gRPC", out)

    def test_ListedException_IsANote(self):
        status, out = self.run_checker({
            "client/client_test.cc": '#include "client/client.h"\n#include "server/server.h"\n',
            "client/CMakeLists.txt": CLEAN["client/CMakeLists.txt"].replace(
                "PRIVATE pst_client", "PRIVATE pst_client pst_server"),
            "tests/layers/exceptions.txt": textwrap.dedent("""\
                # Known exceptions.
                client/client_test.cc -> server/   # moves to tests/ (item 3)
                client_test -> pst_server          # the same test's link (item 3)
                """)})
        self.assertEqual(status, 0, out)
        self.assertIn("note: client/client_test.cc:2:", out)
        self.assertIn("note: client/CMakeLists.txt:5: target client_test", out)
        self.assertIn("2 known exceptions", out)

    def test_StaleException_Fails(self):
        status, out = self.run_checker({
            "tests/layers/exceptions.txt":
                "client/client_test.cc -> server/   # moved to tests/ already\n"})
        self.assertEqual(status, 1, out)
        self.assertIn("tests/layers/exceptions.txt:1: stale exception, delete it", out)

    def test_ExceptionWithoutWhy_IsRefused(self):
        status, out = self.run_checker({
            "tests/layers/exceptions.txt": "client/client_test.cc -> server/\n"})
        self.assertEqual(status, 2, out)
        self.assertIn("say why", out)

    def test_FolderMissingFromTable_Fails(self):
        status, out = self.run_checker({"tools/launcher.cc": '#include "common/status.h"\n'})
        self.assertEqual(status, 1, out)
        self.assertIn("folder tools/ holds C++ but is not in the Layers table", out)

    def test_IncludeOfFolderMissingFromTable_Fails(self):
        status, out = self.run_checker({
            "tools/run.py": "print('no C++ here')\n",
            "tools/launcher.h": "// a header\n",
            "server/server.h": '#include "client/client.h"\n#include "tools/launcher.h"\n'})
        self.assertEqual(status, 1, out)
        self.assertIn("server/server.h:2: server/ (row 4) includes tools/ (no row): "
                      "folder tools/ is not in the Layers table", out)

    def test_Subfolder_IsItsOwnEntry(self):
        doc = DOC.replace("4  server/                the daemon",
                          "4  server/store/          the store\n5  server/  the daemon").replace(
                              "5  cmd/", "6  cmd/")
        status, out = self.run_checker({
            "docs/architecture.md": doc,
            "server/store/store.h": '#include "common/status.h"\n',
            "server/server.h": '#include "server/store/store.h"\n'})
        self.assertEqual(status, 0, out)
        status, out = self.run_checker({
            "docs/architecture.md": doc,
            "server/store/store.h": '#include "server/server.h"\n'})
        self.assertEqual(status, 1, out)
        self.assertIn("server/store/store.h:1: server/store/ (row 4) includes server/ (row 5)",
                      out)

    def test_Subfolder_CountsAsItsParentFromOutside(self):
        doc = DOC.replace("4  server/                the daemon",
                          "4  server/store/          the store\n5  server/  data2/  the daemon")
        doc = doc.replace("5  cmd/", "6  cmd/")
        files = {"docs/architecture.md": doc,
                 "server/store/store.h": '#include "common/status.h"\n'}
        # data2/ sits beside server/: server/store/ is out of its reach,
        # though store/'s own row is above it; tests/ (row 6) may use it.
        files["data2/x.h"] = '#include "server/store/store.h"\n'
        files["tests/store_test.cc"] = '#include "server/store/store.h"\n'
        status, out = self.run_checker(files)
        self.assertEqual(status, 1, out)
        self.assertIn("data2/x.h:1: data2/ (row 5) includes server/store/ (row 4): "
                      "server/ is beside data2/ on row 5", out)
        self.assertNotIn("tests/store_test.cc", out)

    def test_BuildFolders_AreSkipped(self):
        status, out = self.run_checker({
            "build/gen/x.cc": '#include "server/server.h"\n',
            "build-asan/y.h": '#include "server/server.h"\n'})
        self.assertEqual(status, 0, out)

    def test_GrpcInAGrpcFreeFolder_FailsNamingFileAndLine(self):
        status, out = self.run_checker({
            "common/status.cc": '#include "common/status.h"\n#include <grpcpp/grpcpp.h>\n'})
        self.assertEqual(status, 1, out)
        self.assertIn("common/status.cc:2: common/ includes gRPC (<grpcpp/grpcpp.h>)", out)
        status, out = self.run_checker({
            "data/reader.h": '#include "common/status.h"\n#include "proto/wire.grpc.pb.h"\n'})
        self.assertEqual(status, 1, out)
        self.assertIn("data/reader.h:2: data/ includes gRPC", out)
        # client/ is not in the rule: it may.
        status, out = self.run_checker({
            "client/client.h": '#include "common/status.h"\n#include <grpcpp/grpcpp.h>\n'})
        self.assertEqual(status, 0, out)

    def test_GetFlagOutsideTheFlagReaders_Fails(self):
        status, out = self.run_checker({
            "server/server.cc": '#include "server/server.h"\nint n = absl::GetFlag(FLAGS_n);\n',
            "cmd/main.cc": '#include "server/server.h"\nint m = absl::GetFlag(FLAGS_m);\n'})
        self.assertEqual(status, 1, out)
        self.assertIn("server/server.cc:2: absl::GetFlag outside cmd/", out)
        self.assertNotIn("cmd/main.cc", out)

    def test_RuleException_IsANote(self):
        status, out = self.run_checker({
            "common/status.cc": '#include <grpcpp/grpcpp.h>\n',
            "tests/layers/exceptions.txt": "common/status.cc -> gRPC   # moves to rpc/\n"})
        self.assertEqual(status, 0, out)
        self.assertIn("note: common/status.cc:1: common/ includes gRPC", out)

    def test_UnknownRule_IsRefused(self):
        status, out = self.run_checker({
            "docs/architecture.md": DOC.replace("layers-rule: no-grpc", "layers-rule: no-grcp")})
        self.assertEqual(status, 2, out)
        self.assertIn("unknown layers-rule no-grcp", out)

    def test_DocWithoutMarker_IsRefused(self):
        status, out = self.run_checker({
            "docs/architecture.md": DOC.replace("<!-- layers-table -->\n", "")})
        self.assertEqual(status, 2, out)
        self.assertIn("layers-table", out)


if __name__ == "__main__":
    unittest.main()
