#!/usr/bin/env python3
"""Refreshes the code blocks in README.md, CONTRIBUTING.md and docs/*.md from examples/*.cpp.

A block preceded by `<!-- snippet: examples/FILE.cpp#NAME -->` is replaced by the lines between
the two `// [NAME]` markers of that file (common indentation removed). The test
`docs_snippets` checks the result; run this after editing an example.
"""
import pathlib, re, sys, textwrap

root = pathlib.Path(__file__).resolve().parent.parent
marker = re.compile(r"<!-- snippet: (examples/[\w./-]+\.cpp)#([\w-]+) -->")

def region(path, name):
    lines = (root / path).read_text().splitlines()
    tags = [i for i, l in enumerate(lines) if l.strip() == f"// [{name}]"]
    if len(tags) != 2:
        sys.exit(f"{path}: expected two '// [{name}]' markers, found {len(tags)}")
    return textwrap.dedent("\n".join(lines[tags[0] + 1:tags[1]]))

for doc in [root / "README.md", root / "CONTRIBUTING.md", *sorted((root / "docs").glob("*.md"))]:
    out, lines, i = [], doc.read_text().splitlines(), 0
    while i < len(lines):
        out.append(lines[i])
        m = marker.search(lines[i])
        if m and i + 1 < len(lines) and lines[i + 1].strip() == "```cpp":
            j = i + 2
            while lines[j].strip() != "```":
                j += 1
            out += ["```cpp", *region(m[1], m[2]).splitlines(), "```"]
            i = j + 1
            continue
        i += 1
    doc.write_text("\n".join(out) + "\n")
print("snippets refreshed")
