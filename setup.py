"""Declares the optional C accelerators (the per-record codec, the plain-batch append and the
active segment's appender); everything else is in pyproject.toml.

The extensions are optional: if one cannot be compiled, tierlog falls back to its pure-Python twin.
"""

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


class OptionalBuildExt(build_ext):
    """Build the accelerators when a compiler is present; never fail the install over one."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as exc:  # noqa: BLE001 - any toolchain failure means "no accelerator"
            self.warn(f"tierlog: C accelerators not built ({exc}); using pure Python")

    def build_extension(self, ext: Extension) -> None:
        try:
            super().build_extension(ext)
        except Exception as exc:  # noqa: BLE001
            self.warn(f"tierlog: {ext.name} not built ({exc}); using its pure-Python twin")


setup(
    ext_modules=[
        Extension(
            "tierlog.records._speedups",
            sources=["core/records/_speedups.c"],
            depends=["core/records/_record_framing.h"],
            extra_compile_args=["-O2"],
        ),
        Extension(
            "tierlog.records.arrow._columnar",
            sources=["core/records/arrow/_columnar.c"],
            depends=["core/records/_record_framing.h"],
            extra_compile_args=["-O2"],
        ),
        Extension(
            "tierlog.records._plain_batch_write",
            sources=["core/records/_plain_batch_write.c"],
            depends=["core/records/_plain_batch_write.h"],
            extra_compile_args=["-O2"],
        ),
        Extension(
            "tierlog.log._segment_appender",
            sources=["core/log/_segment_appender.c"],
            depends=["core/records/_plain_batch_write.h"],
            extra_compile_args=["-O2"],
        ),
    ],
    cmdclass={"build_ext": OptionalBuildExt},
)
