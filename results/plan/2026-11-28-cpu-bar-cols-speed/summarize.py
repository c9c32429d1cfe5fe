#!/usr/bin/env python3
"""Table of timings.txt (run.sh's output): per case, form and binary, the median and the least over the rounds of
bench-bar-cols's medians: wall and CPU seconds of tiles_bar_cols_find (before: the old dist_bar_cols's two calls),
and the wall seconds of the two calls tiles_bar_cols_build and tiles_bars_compact_exact on their own."""
import re, statistics, sys
rows, key = {}, None
for line in open(sys.argv[1] if len(sys.argv) > 1 else "timings.txt"):
    m = re.match(r"== round \d+: (before|after), --world (\d+) --rank \d+(?:, (\d+) thread)?", line)
    if m:
        who = m.group(1) + ("" if m.group(1) == "before" else f", {m.group(3)} thread(s)")
        key = (int(m.group(2)), who)
        continue
    m = re.match(r"\s+(tile form|runs form) ", line)
    if m:
        form = m.group(1)
        continue
    m = re.search(r"tiles_bar_cols_build ([\d.]+) s .* tiles_bars_compact_exact ([\d.]+) s", line)
    if m and key:
        two = (float(m.group(1)), float(m.group(2)))
    m = re.search(r"tiles_bar_cols_find, \d+ thread\(s\): ([\d.]+) s \(([\d.]+) s CPU\)", line)
    if m and key:
        rows.setdefault((key[0], form, key[1]), []).append((float(m.group(1)), float(m.group(2))) + two)
print("| ranks | form | binary | rounds | find: wall s, median (least) | find: CPU s, median (least) | "
      "build + check alone: wall s, medians |")
print("|---|---|---|---|---|---|---|")
for (w, form, who), v in sorted(rows.items(), key=lambda r: (r[0][0], r[0][1], r[0][2] != "before", r[0][2])):
    wall, cpu = [x[0] for x in v], [x[1] for x in v]
    build, check = statistics.median([x[2] for x in v]), statistics.median([x[3] for x in v])
    print(f"| {w} | {form} | {who} | {len(v)} | {statistics.median(wall):.3f} ({min(wall):.3f}) | "
          f"{statistics.median(cpu):.3f} ({min(cpu):.3f}) | {build:.3f} + {check:.3f} |")
