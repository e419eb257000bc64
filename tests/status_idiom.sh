#!/bin/sh
# Prints each hand-written early return that LF_RETURN_IF_ERROR / LF_ASSIGN_OR_RETURN
# (common/status_macros.h) says in one line, as "file:line: text", and exits 1 if any:
#   absl::StatusOr<T> x = expr;  if (!x.ok()) return x.status();   (or `return x;`)
#   if (absl::Status s = expr; !s.ok()) return s;
#   absl::Status s = expr;       if (!s.ok()) return s;
# A failure path that does anything else (resets a statement, adds context, returns a
# different status) is not matched and stays as written.
#   tests/status_idiom.sh PATH...   (folders or .cc files, relative to the repository root)
set -eu
cd "$(dirname "$0")/.."
find "$@" -name '*.cc' -print | sort | xargs perl -0777 -ne '
  my $src = $_;
  while ($src =~ m{
      (?:absl::)?StatusOr<[^;={}]*>\s+(\w+)\s*=[^;]*;\s*if\s*\(!\1\.ok\(\)\)\s*\{?\s*return\s+\1(?:\.status\(\))?;
    | if\s*\(absl::Status\s+(\w+)\s*=[^;]*;\s*!\2\.ok\(\)\)\s*\{?\s*return\s+\2;
    | absl::Status\s+(\w+)\s*=[^;]*;\s*if\s*\(!\3\.ok\(\)\)\s*\{?\s*return\s+\3;
  }gsx) {
    my $line = 1 + (substr($src, 0, $-[0]) =~ tr/\n//);
    (my $text = $&) =~ s/\s+/ /g;
    print "$ARGV:$line: $text\n";
    $found = 1;
  }
  END { exit($found ? 1 : 0) }' || exit 1
