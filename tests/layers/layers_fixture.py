"""The tree and the runner that the fixture tests of check_layers.py share
(check_layers_test.py, check_layers_cmake_test.py): DOC, a small Layers
table with both rules; CLEAN, a tree that follows it; and LayersFixture,
which writes CLEAN with a test's changes into a temporary directory and runs
the checker there.
"""

import os
import subprocess
import sys
import tempfile
import textwrap

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


class LayersFixture:
    """Mixed into a unittest.TestCase: gives it run_checker."""

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
