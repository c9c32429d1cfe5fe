#!/usr/bin/env python3
"""sass_list.py — one kernel of `nvdisasm -g -c` output as a listing: address, source file:line, instruction; labels kept.
Usage: python3 sass_list.py ALL.sass MANGLED_NAME_PART OUT.lst"""
import re
import sys

lines = open(sys.argv[1]).read().split("\n")
out, on, cur = [], False, ""
for ln in lines:
    if ln.startswith("//-----") and ".text." in ln:
        on = sys.argv[2] in ln
        continue
    if not on:
        continue
    m = re.search(r'//## File "([^"]*)", line (\d+)', ln)
    if m:
        cur = m.group(1).split("/")[-1] + ":" + m.group(2)
        continue
    m = re.match(r"\s*/\*([0-9a-f]{4,})\*/\s+(.*?);", ln)
    if m:
        out.append("%s %-28s %s" % (m.group(1), cur, m.group(2).strip()))
        continue
    m = re.match(r"^(\.L_x_\d+):", ln)
    if m:
        out.append(m.group(1) + ":")
open(sys.argv[3], "w").write("\n".join(out) + "\n")
