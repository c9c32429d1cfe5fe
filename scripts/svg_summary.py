#!/usr/bin/env python3
"""svg_summary.py — parse a `sparsering sim --svg` Gantt chart as XML and print its structure, so
tests (tests/test_studies_svg.c) can check it without a browser:

    ranks N                      rows (<g class="rank">) in document order
    row R bars B lanes a,b,...   per row: bar count and lane labels
    bar R X W | TITLE            every bar: row, x, width, hover title

Exits 1 (with the parser's message) when the file is not well-formed XML.
"""
import sys
import xml.etree.ElementTree as ET

NS = "{http://www.w3.org/2000/svg}"


def main(path):
    try:
        root = ET.parse(path).getroot()
    except ET.ParseError as err:
        print(f"svg_summary: {path}: not well-formed XML: {err}")
        return 1
    if root.tag != NS + "svg":
        print(f"svg_summary: {path}: root element is {root.tag}, not svg")
        return 1
    rows = [g for g in root.iter(NS + "g") if g.get("class") == "rank"]
    print(f"ranks {len(rows)}")
    bars = []
    for g in rows:
        r = int(g.get("id").split("-")[1])
        lanes = [t.text for t in g.findall(NS + "text") if t.get("font-size") == "9"]
        mine = [b for b in g.findall(NS + "rect") if b.get("class") == "bar"]
        print(f"row {r} bars {len(mine)} lanes {','.join(lanes)}")
        for b in mine:
            title = b.find(NS + "title")
            bars.append(f"bar {r} {b.get('x')} {b.get('width')} | {title.text if title is not None else ''}")
    print("\n".join(bars))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
