"""Builds weft's Python package with pip, from this directory:

    pip install --no-build-isolation .

The extension weft._weft is compiled together with the weft library's own C
sources (../src, ../include), so the installed package needs no libweft.so
beside it; it links only libcrypto (OpenSSL) and pthreads. Set WEFT_LIBDIR to
a directory holding an installed libweft.so to link that instead (with
WEFT_INCLUDEDIR for weft.h, default ../include). The CMake build
(WEFT_BUILD_PYTHON) is the other way, for development."""

import glob
import os

from setuptools import Extension, setup

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def rel(path):
    """setuptools wants source paths relative to this directory."""
    return os.path.relpath(path, HERE)


EXT_SOURCES = [rel(os.path.join(HERE, "weft", f)) for f in ("_weft.c", "_weft_handle.c", "_weft_group.c")]
CFLAGS = ["-std=c11", "-D_GNU_SOURCE", "-fvisibility=hidden", "-O2"]

libdir = os.environ.get("WEFT_LIBDIR")
if libdir:
    ext = Extension("weft._weft", sources=EXT_SOURCES,
                    include_dirs=[os.environ.get("WEFT_INCLUDEDIR", os.path.join(ROOT, "include"))],
                    library_dirs=[libdir], runtime_library_dirs=[libdir], libraries=["weft"],
                    extra_compile_args=CFLAGS)
else:
    lib_sources = sorted(glob.glob(os.path.join(ROOT, "src", "**", "*.c"), recursive=True))
    if not lib_sources:
        raise SystemExit("weft's C sources were not found in %s: build from a weft source tree, or set "
                         "WEFT_LIBDIR to an installed libweft" % os.path.join(ROOT, "src"))
    ext = Extension("weft._weft", sources=EXT_SOURCES + [rel(p) for p in lib_sources],
                    include_dirs=[os.path.join(ROOT, "include"), os.path.join(ROOT, "src")],
                    libraries=["crypto", "pthread", "m"], extra_compile_args=CFLAGS)

setup(
    name="weft",
    version="0.1.0",
    description="Collective communication for distributed training (numpy API and a Horovod-compatible weft.torch)",
    packages=["weft", "weft.torch"],
    ext_modules=[ext],
    python_requires=">=3.8",
    install_requires=["numpy"],
    extras_require={"torch": ["torch"]},
)
