#!/usr/bin/python3
"""Runs check_layers.py on small trees built in a temporary directory: the
table and its rules, the includes, the exceptions file. The CMake link
checks are in check_layers_cmake_test.py; the shared tree in
layers_fixture.py.

  /usr/bin/python3 tests/layers/check_layers_test.py
"""

import textwrap
import unittest

from layers_fixture import CLEAN, DOC, LayersFixture


class CheckLayersTest(LayersFixture, unittest.TestCase):

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
