"""The wheel: setuptools runs the project's CMake build (as pybind11's cmake_example does) and
puts what it installs inside the Python package:

    linfuse/lib/liblinfuse.so.X.Y       the library (its soname), found by the package (_install.py)
    linfuse/lib/liblinfuse_cuda.so      the CUDA module and `linfuse profile`'s injection library,
    linfuse/lib/liblinfuse_inject.so    where nvcc was there to build them
    linfuse/lib/libjansson.so.4 ...     the libraries not every Linux system has (below)
    linfuse/bin/linfuse                 the tool, which the `linfuse` command runs

Every file finds the others through $ORIGIN; the modules find CUDA's libraries in the nvidia-*
packages beside linfuse or on the system (CMakeLists.txt, LINFUSE_WHEEL; src/backend/module.c).

    python3 -m pip wheel --no-build-isolation --no-deps -w dist .      (make wheel)

Environment: LINFUSE_CUDA=AUTO|ON|OFF (AUTO: the CUDA module where nvcc is found),
LINFUSE_WHEEL_BUILD_DIR (where everything is built: CMake, its staged install, setuptools; build-wheel by
default), JOBS (build jobs)."""
import os
import re
import shutil
import subprocess

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

try:
    from wheel.bdist_wheel import bdist_wheel
except ImportError:  # building an sdist needs no wheel
    bdist_wheel = None

ROOT = os.path.dirname(os.path.abspath(__file__))
# Everything built goes under one folder, not into the source tree (setuptools' own build/ would
# land in the CMake build folder of the README).
BUILD = os.path.abspath(os.environ.get("LINFUSE_WHEEL_BUILD_DIR") or os.path.join(ROOT, "build-wheel"))
# Libraries the library or the tool needs that a Linux system may lack (manylinux's list of
# libraries every system has names neither), carried in the wheel under their own sonames.
# Debian's libjansson.a and libz.a are not position-independent code, so they cannot be linked
# into a shared library: their shared objects are carried instead. A process that has loaded one
# of them already (zlib, OpenMP through another package) uses that one: they keep their ABIs.
# No well-kept packaged tool does this (auditwheel is not in Debian), hence these lines.
CARRIED = ("libjansson.so.4", "libz.so.1", "libgomp.so.1", "libsqlite3.so.0")


def version():
    text = open(os.path.join(ROOT, "include", "linfuse", "version.h")).read()
    return ".".join(re.search(r"#define LF_VERSION_%s (\d+)" % k, text).group(1) for k in ("MAJOR", "MINOR", "PATCH"))


def resolved(elf):
    """The files the dynamic linker finds for elf's needed libraries: {soname: path}."""
    out = subprocess.run(["ldd", elf], capture_output=True, text=True, check=True).stdout
    return dict(re.findall(r"^\s*(\S+) => (/\S+)", out, re.M))


class build_with_cmake(build_py):
    """build_py, then the CMake build installed into the package being built."""

    def run(self):
        super().run()
        build = os.path.join(BUILD, "cmake")
        stage = os.path.join(BUILD, "stage")
        jobs = os.environ.get("JOBS") or str(os.cpu_count() or 2)
        self.spawn(["cmake", "-S", ROOT, "-B", build, "-DCMAKE_BUILD_TYPE=Release", "-DLINFUSE_TESTS=OFF",
                    "-DLINFUSE_WHEEL=ON", "-DCMAKE_INSTALL_LIBDIR=lib",
                    "-DLINFUSE_CUDA=" + os.environ.get("LINFUSE_CUDA", "AUTO")])
        self.spawn(["cmake", "--build", build, "-j", jobs])
        shutil.rmtree(stage, ignore_errors=True)
        self.spawn(["cmake", "--install", build, "--prefix", stage])
        pkg = os.path.join(self.build_lib, "linfuse")
        lib, bin_ = os.path.join(pkg, "lib"), os.path.join(pkg, "bin")
        shutil.rmtree(lib, ignore_errors=True)
        shutil.rmtree(bin_, ignore_errors=True)
        os.makedirs(lib)
        os.makedirs(bin_)
        staged = os.path.join(stage, "lib")
        # the library under its soname (a wheel holds no symbolic links), and the modules
        soname = None
        for name in sorted(os.listdir(staged)):
            path = os.path.join(staged, name)
            if re.fullmatch(r"liblinfuse\.so\.\d+(\.\d+)?", name) and os.path.islink(path):
                soname = name
            if soname == name or name in ("liblinfuse_cuda.so", "liblinfuse_inject.so"):
                shutil.copy2(os.path.realpath(path), os.path.join(lib, name))
        if not soname:
            raise RuntimeError("linfuse: no liblinfuse.so.X.Y in %s" % staged)
        tool = os.path.join(bin_, "linfuse")
        shutil.copy2(os.path.join(stage, "bin", "linfuse"), tool)
        carried = {}
        for elf in [tool] + [os.path.join(lib, n) for n in os.listdir(lib)]:
            carried.update({k: v for k, v in resolved(elf).items() if k in CARRIED and not k.startswith("liblinfuse")})
        for name, path in sorted(carried.items()):
            shutil.copy2(path, os.path.join(lib, name))
        with open(os.path.join(pkg, "_install.py"), "w") as f:
            f.write('"""Written by setup.py: where the wheel keeps liblinfuse, from this package\'s directory."""\n'
                    'LIBDIR = "lib"\nSONAME = "%s"\n' % soname)


class NativeDistribution(Distribution):
    """A package that carries native libraries: installed as platform files (platlib)."""

    def has_ext_modules(self):
        return True


commands = {"build_py": build_with_cmake}
if bdist_wheel:
    class bdist_wheel_native(bdist_wheel):
        """py3-none-<platform>: the package is Python over ctypes, so one wheel serves every Python 3
        and every torch; its libraries are this platform's."""

        def get_tag(self):
            return "py3", "none", super().get_tag()[2]

    commands["bdist_wheel"] = bdist_wheel_native

os.makedirs(BUILD, exist_ok=True)
setup(
    name="linfuse",
    version=version(),
    description="What happens under nn.Linear and a gated MLP: fused kernels, compile mode and trace tools",
    long_description=open(os.path.join(ROOT, "README.md")).read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.9",
    package_dir={"": "python"},
    packages=["linfuse"],
    entry_points={"console_scripts": ["linfuse = linfuse._cli:main"]},
    cmdclass=commands,
    distclass=NativeDistribution,
    options={"build": {"build_base": os.path.join(BUILD, "py")}, "egg_info": {"egg_base": BUILD}},
    zip_safe=False,
)
