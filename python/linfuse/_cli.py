"""The `linfuse` command of a wheel: the tool built with the library, run in this process's place
(its RUNPATH finds the library in the package's lib/)."""
import os
import sys


def main():
    tool = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin", "linfuse")
    if not os.access(tool, os.X_OK):
        sys.exit("linfuse: %s is missing: this linfuse package was not installed from a wheel "
                 "(a source checkout runs build/linfuse)" % tool)
    os.execv(tool, [tool] + sys.argv[1:])


if __name__ == "__main__":
    main()
