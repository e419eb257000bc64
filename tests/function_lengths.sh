#!/bin/sh
# Prints the product's C++ functions longer than N lines (default 120), longest first:
# "lines file:first_line name". The product is every folder but tests/ and build/;
# universal-ctags finds each function's first and last line.
#   tests/function_lengths.sh [N]
set -eu
limit="${1:-120}"
cd "$(dirname "$0")/.."
ctags -x --languages=C++ --kinds-C++=f --fields=+e --_xformat='%n %e %F %N' -R \
    api clients common jobspec scheduler server storage worker 2>/dev/null |
  awk -v limit="$limit" '$2 != "" { n = $2 - $1 + 1; if (n > limit) print n, $3 ":" $1, $4 }' |
  sort -rn
