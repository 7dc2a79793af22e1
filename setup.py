"""Builds the native CPU kernels with the package (everything else is in pyproject.toml).

After the usual build_py step, the kernels are compiled (`gpu_profiler.native_build`) into the
package being built, or in place into ``kernels/`` for an editable install; the wheel is
then platform-tagged (py3-none-<platform>: the library does not link Python). A failed
build leaves a sidecar saying why, and the kernels run through numba's JIT.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from setuptools import Distribution, setup
from setuptools.command.bdist_wheel import bdist_wheel
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent

# Run in a child process: the packages (with their sources' folders as __path__) without
# their __init__ modules, whose imports the build environment need not have.
BUILD = """
import sys, types
root, *argv = sys.argv[1:]
for name, folder in (("gpu_profiler", "gpu_profiler"), ("gpu_profiler.kernels", "kernels")):
    package = sys.modules[name] = types.ModuleType(name)
    package.__path__ = [f"{root}/{folder}"]
from gpu_profiler import native_build
sys.exit(native_build.main(argv))
"""


class BuildKernels(build_py):
    """build_py, then the native kernels: into the build, or in place when editable."""

    def run(self) -> None:
        super().run()
        into = [] if self.editable_mode else \
            ["--into", str(Path(self.build_lib, "gpu_profiler", "kernels"))]
        if subprocess.run([sys.executable, "-c", BUILD, str(ROOT), *into]).returncode:
            self.warn("the native CPU kernels were not built (see above): they will run "
                      "through numba's JIT")


class PlatformWheel(bdist_wheel):
    def get_tag(self) -> tuple[str, str, str]:
        return ("py3", "none", super().get_tag()[2])


class WithLibrary(Distribution):
    def has_ext_modules(self) -> bool:  # a platform wheel, installed to platlib
        return True


setup(distclass=WithLibrary, cmdclass={"build_py": BuildKernels, "bdist_wheel": PlatformWheel})
