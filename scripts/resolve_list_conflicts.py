"""Resolve git merge conflicts in book/references.bib and book/glossary.md by keeping both sides.

Both files are lists that several authors append to; a conflict there almost
always means two authors appended at the same place. This keeps every entry
once (by bibliography key / glossary term) and restores the blank-line
structure. Usage: ``python scripts/resolve_list_conflicts.py`` after a merge.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONFLICT = re.compile(r"<<<<<<< [^\n]*\n(.*?)(?:\|\|\|\|\|\|\| [^\n]*\n.*?)?=======\n(.*?)>>>>>>> [^\n]*\n", re.S)


def _bib(text: str) -> str:
    text = CONFLICT.sub(lambda m: m.group(1) + "\n" + m.group(2), text)
    entries, seen = [], set()
    for chunk in re.split(r"\n(?=@)", "\n" + text):
        chunk = chunk.strip()
        if not chunk:
            continue
        key = chunk.split("{", 1)[1].split(",", 1)[0]
        if key in seen:
            continue
        seen.add(key)
        lines = chunk.split("\n")
        if lines[-1] != "}":
            lines.append("}")
        entries.append("\n".join(lines))
    return "\n\n".join(entries) + "\n"


def _glossary(text: str) -> str:
    text = CONFLICT.sub(lambda m: m.group(1) + "\n" + m.group(2), text)
    head, rest = text.split("```{glossary}\n", 1)
    block, tail = rest.split("\n```", 1)
    terms, order, current = {}, [], None
    for line in block.split("\n"):
        if line and not line.startswith(" "):
            current = line
            if current not in terms:
                terms[current] = []
                order.append(current)
            else:
                current = None  # duplicate term: keep the first definition
        elif line.strip() and current is not None:
            terms[current].append(line)
    body = "\n\n".join("\n".join([t] + terms[t]) for t in order)
    return head + "```{glossary}\n" + body + "\n```" + tail


def main() -> int:
    for name, fix in (("book/references.bib", _bib), ("book/glossary.md", _glossary)):
        path = ROOT / name
        path.write_text(fix(path.read_text()))
        print(f"resolved {name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
