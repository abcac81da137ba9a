# lit configuration for the Torq pass tests: each .mlir file runs torq-opt
# with a pass pipeline and checks the printed IR with FileCheck.
import os
import shutil

import lit.formats

config.name = "torq-compiler"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".mlir"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.test_source_root, "Output")
bindir = os.path.dirname(shutil.which("torq-opt") or "")
config.environment["PATH"] = os.pathsep.join([bindir, os.environ.get("PATH", "")])
config.environment["PYTHONPATH"] = os.environ.get("PYTHONPATH", "")
config.substitutions.append(("FileCheck", "filecheck"))
