#!/bin/sh
# The tool builds against the library's public headers alone: every file of src/cli/ includes only
# <linfuse/...> headers, its own cli/ headers and system headers (<...> outside linfuse's source).
# What it calls is held to the exported functions by linking it to the shared library; this holds
# its includes to the public declarations.
# Usage: cli_includes_test.sh <source dir>
set -eu
cd "$1"
bad=$(grep -n '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' src/cli/*.c src/cli/*.h | grep -v '"cli/[a-z_]*\.h"\|"linfuse/[a-z_]*\.h"' || true)
if [ -n "$bad" ]; then
    echo "src/cli includes a header that is neither public (linfuse/) nor the tool's own (cli/):"
    echo "$bad"
    echo "0 passed, 1 failed"
    exit 1
fi
echo "$(ls src/cli/*.c src/cli/*.h | wc -l) files of src/cli include public or cli/ headers only"
echo "1 passed, 0 failed"
