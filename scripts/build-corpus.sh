#!/bin/sh
# Build the small natural-text training corpus from documentation that Debian packages ship:
# the license texts in /usr/share/common-licenses (package base-files) and every package's
# /usr/share/doc/PKG/copyright file. Identical files are kept once; the corpus stops at MAX bytes.
# Writes OUT/debian-docs.txt and OUT/PROVENANCE.txt (every file taken, its package, size, sha256).
# Usage: sh scripts/build-corpus.sh [OUT (default build/corpus)] [MAX bytes (default 4194304)]
set -e
out=${1:-build/corpus}
max=${2:-4194304}
[ -s "$out/debian-docs.txt" ] && [ -s "$out/PROVENANCE.txt" ] && exit 0
mkdir -p "$out"
tmp="$out/debian-docs.txt.tmp.$$"
prov="$out/PROVENANCE.txt.tmp.$$"
seen="$out/seen.tmp.$$"
: >"$tmp"
: >"$seen"
{
  echo "# sparsering natural-text corpus: provenance"
  echo "# built $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME")"
  echo "# by scripts/build-corpus.sh from documentation shipped in Debian packages (licenses and"
  echo "# copyright statements); each file keeps its own license, listed in the file itself."
  echo "# columns: path package bytes sha256"
} >"$prov"
for f in $(find /usr/share/common-licenses -maxdepth 1 -type f 2>/dev/null | LC_ALL=C sort) \
         $(ls /usr/share/doc/*/copyright 2>/dev/null | LC_ALL=C sort); do
  [ -f "$f" ] || continue
  sum=$(sha256sum "$f" | cut -d' ' -f1)
  grep -q "$sum" "$seen" && continue
  size=$(wc -c <"$f")
  have=$(wc -c <"$tmp")
  [ $((have + size + 2)) -gt "$max" ] && break
  echo "$sum" >>"$seen"
  case "$f" in
    /usr/share/common-licenses/*) pkg=base-files ;;
    *) pkg=$(basename "$(dirname "$f")") ;;
  esac
  cat "$f" >>"$tmp"
  printf '\n\n' >>"$tmp"
  echo "$f $pkg $size $sum" >>"$prov"
done
echo "# corpus: $(wc -c <"$tmp") bytes, sha256 $(sha256sum "$tmp" | cut -d' ' -f1)" >>"$prov"
rm -f "$seen"
mv "$tmp" "$out/debian-docs.txt"
mv "$prov" "$out/PROVENANCE.txt"
