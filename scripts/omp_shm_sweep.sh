#!/bin/sh
# Remove this user's stale, empty registration files of LLVM's OpenMP runtime from /dev/shm.
#
# libomp (clang's -fopenmp; Debian 12 ships LLVM 14's) registers every process at start-up in
# /dev/shm/__KMP_REGISTERED_LIB_<pid>_<uid>: it creates the file, sizes it to 1 KiB, maps it and
# reads it back. A process killed between the create and the resize (a file-size limit under
# 1 KiB, a kill at start-up) leaves the file empty, and a later process that gets the same pid
# maps the empty file and dies of SIGBUS reading it, before it runs a line of its own. /dev/shm
# outlives a test run on a machine that is not fresh, so `make test` clears such leftovers before
# the clang builds' tests. Only empty files, only this user's (the name ends in the uid), and only
# those older than two minutes: a live process sizes its own file microseconds after making it.
set -eu
dir=${1:-/dev/shm}
[ -d "$dir" ] || exit 0
uid=$(id -u)
find -H "$dir" -maxdepth 1 -type f -name "__KMP_REGISTERED_LIB_*_$uid" -user "$uid" -empty -mmin +2 |
    while IFS= read -r f; do
        rm -f -- "$f" && echo "omp_shm_sweep: removed $f (an empty OpenMP registration a killed process left)"
    done
