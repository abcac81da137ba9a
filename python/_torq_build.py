"""Build-time only (pyproject's cmdclass; not installed): puts iree_torq.pth at the root of
iree-torq's wheel, regular and editable.

Contract: BuildPy is setuptools' build_py plus one file, python/iree_torq.pth, copied to the
site-packages root of the install: for a wheel, build_lib's root (bdist_wheel installs that
tree as is); for an editable wheel (pip install -e, build_tools/setup.sh), the unpacked wheel's
root, which editable_wheel leaves in the install command's install_lib, since its meta path
finder serves only packages and modules from the source tree, not build_lib's files.
setuptools' data-files cannot do it: they land in <name>.data/data (the environment's prefix),
and editable_wheel never runs install_data (setuptools 84 looks up a `has_data` that
Distribution does not define).
"""

import os

from setuptools.command.build_py import build_py

PTH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "iree_torq.pth")


class BuildPy(build_py):
    def run(self):
        super().run()
        roots = [self.build_lib]
        if getattr(self, "editable_mode", False):
            roots.append(self.get_finalized_command("install").install_lib)
        for root in roots:
            self.mkpath(root)
            self.copy_file(PTH, os.path.join(root, os.path.basename(PTH)))
