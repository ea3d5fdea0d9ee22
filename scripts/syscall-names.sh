#!/usr/bin/env bash
# Writes crates/kernel/src/names.rs, the x86-64 system call names by number, from the C
# library's kernel headers (Debian: linux-libc-dev). Run it again when a newer header adds calls.
set -euo pipefail
header=${1:-/usr/include/x86_64-linux-gnu/asm/unistd_64.h}
out=$(dirname "$0")/../crates/kernel/src/names.rs
{
  echo "//! x86-64 Linux system call names by number, from \`asm/unistd_64.h\` (written by"
  echo "//! \`scripts/syscall-names.sh\`; do not edit by hand)."
  echo
  echo "/// The name of each system call number below \`NAMES.len()\`; \"\" where none is assigned."
  echo "pub(crate) static NAMES: &[&str] = &["
  awk '/^#define __NR_/ { sub("__NR_", "", $2); name[$3] = $2; if ($3 > max) max = $3 }
       END { for (i = 0; i <= max; i++) printf "    \"%s\",\n", name[i] }' "$header"
  echo "];"
} > "$out"
echo "wrote $out"
