#!/usr/bin/python3
"""Runs check_layers.py on small trees built in a temporary directory: the
CMake link graph held to the Layers table, and the no-grpc rule on links.
The shared tree is in layers_fixture.py.

  /usr/bin/python3 tests/layers/check_layers_cmake_test.py
"""

import textwrap
import unittest

from layers_fixture import CLEAN, DOC, LayersFixture


class CheckLayersCmakeTest(LayersFixture, unittest.TestCase):

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


if __name__ == "__main__":
    unittest.main()
