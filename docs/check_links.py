"""Check that every relative link in README.md and docs/**/*.md resolves to a file, and
every #anchor to a heading of its target (GitHub's slugs). Usage: python docs/check_links.py"""

import re
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def anchors(md: Path) -> Iterator[str]:
    seen: dict[str, int] = {}
    for title in re.findall(r"^#{1,6}\s+(.*?)\s*#*$", FENCE.sub("", md.read_text()), re.M):
        slug = re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        yield slug if n == 0 else f"{slug}-{n}"


def main() -> int:
    bad = []
    for md in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        for target in LINK.findall(FENCE.sub("", md.read_text())):
            if re.match(r"[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            dest = (md.parent / path).resolve() if path else md
            if not dest.exists():
                bad.append(f"{md.relative_to(ROOT)}: {target}: no such file")
            elif anchor and dest.suffix == ".md" and anchor not in set(anchors(dest)):
                bad.append(f"{md.relative_to(ROOT)}: {target}: no such heading")
    print("\n".join(bad) or "every link resolves")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
