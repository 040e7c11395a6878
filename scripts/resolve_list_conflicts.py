"""Resolve git merge conflicts in book/references.bib and book/glossary.md by keeping both sides.

Both files are lists that several authors append to; a conflict there almost
always means two authors appended at the same place. This keeps every entry
once (by bibliography key / glossary term) and restores the blank-line
structure; the glossary is rewritten alphabetically, one block per initial letter. Usage: ``python scripts/resolve_list_conflicts.py`` after a merge.
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


def _term_key(term: str) -> str:
    """The sort key of a glossary term: lower case, letters, digits and spaces only."""
    return re.sub(r"[^a-z0-9 ]", "", term.lower())


def render_glossary(head: str, terms: dict[str, list[str]]) -> str:
    """The glossary page: ``head``, a line of letter links, then one ``{glossary}`` block per
    initial letter under a ``## <letter>`` heading (label ``glossary-<letter>``), terms alphabetical."""
    groups: dict[str, list[str]] = {}
    for term in sorted(terms, key=_term_key):
        groups.setdefault(_term_key(term)[0].upper(), []).append(term)
    nav = " · ".join(f"[{letter}](#glossary-{letter.lower()})" for letter in groups)
    parts = [head.rstrip("\n") + "\n\n", nav + "\n"]
    for letter, names in groups.items():
        body = "\n\n".join("\n".join([t] + terms[t]) for t in names)
        parts.append(f"\n(glossary-{letter.lower()})=\n## {letter}\n\n```{{glossary}}\n{body}\n```\n")
    return "".join(parts)


def _glossary(text: str) -> str:
    text = CONFLICT.sub(lambda m: m.group(1) + "\n" + m.group(2), text)
    # the page's opening: everything before the letter links (or, in the old one-block form, the block)
    first = re.search(r"^\[[A-Z]\]\(#glossary-|^\(glossary-[a-z]\)=|^```\{glossary\}", text, flags=re.M)
    if first is None:
        raise ValueError("book/glossary.md has no ```{glossary} block")
    head = text[: first.start()]
    terms: dict[str, list[str]] = {}
    for block in re.findall(r"^```\{glossary\}\n(.*?)\n```", text, flags=re.M | re.S):
        current = None
        for line in block.split("\n"):
            if line and not line.startswith(" "):
                current = line if line not in terms else None  # a duplicate term: keep the first definition
                if current is not None:
                    terms[current] = []
            elif line.strip() and current is not None:
                terms[current].append(line)
    return render_glossary(head, terms)


def main() -> int:
    for name, fix in (("book/references.bib", _bib), ("book/glossary.md", _glossary)):
        path = ROOT / name
        path.write_text(fix(path.read_text()))
        print(f"resolved {name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
