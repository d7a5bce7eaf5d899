"""Declares the optional C accelerator for the per-record codec; everything else is in pyproject.toml.

The extension is optional: if it cannot be compiled, tierlog falls back to its pure-Python codec.
"""

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


class OptionalBuildExt(build_ext):
    """Build the accelerator when a compiler is present; never fail the install over it."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as exc:  # noqa: BLE001 - any toolchain failure means "no accelerator"
            self.warn(f"tierlog: C accelerator not built ({exc}); using the pure-Python codec")

    def build_extension(self, ext: Extension) -> None:
        try:
            super().build_extension(ext)
        except Exception as exc:  # noqa: BLE001
            self.warn(f"tierlog: {ext.name} not built ({exc}); using the pure-Python codec")


setup(
    ext_modules=[
        Extension(
            "tierlog.records._speedups",
            sources=["core/records/_speedups.c"],
            extra_compile_args=["-O2"],
        )
    ],
    cmdclass={"build_ext": OptionalBuildExt},
)
