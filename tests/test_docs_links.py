# Every relative link in README.md and docs/*.md reaches a file that exists,
# and every #anchor a heading of the file it names (as GitHub makes them: lower
# case, punctuation dropped, spaces as hyphens, -1, -2... for a repeat).
import glob
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LINK = re.compile(r"\]\(([^)\s]+)\)")


def slug(heading):
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(path):
    found, seen, fenced = set(), {}, False
    for line in open(path, encoding="utf-8"):
        if line.startswith("```"):
            fenced = not fenced
        m = None if fenced else re.match(r"#+ (.*)", line)
        if m:
            a = slug(m.group(1))
            n = seen.get(a, 0)
            seen[a] = n + 1
            found.add(a if n == 0 else "%s-%d" % (a, n))
    return found


def broken(files):
    bad = []
    for f in files:
        for m in LINK.finditer(open(f, encoding="utf-8").read()):
            target = m.group(1)
            if "://" in target or target.startswith("mailto:"):
                continue
            path, _, anchor = target.partition("#")
            dest = os.path.normpath(os.path.join(os.path.dirname(f), path)) if path else f
            if not os.path.exists(dest):
                bad.append("%s: %s (no such file)" % (os.path.relpath(f, ROOT), target))
            elif anchor and dest.endswith(".md") and anchor not in anchors(dest):
                bad.append("%s: %s (no such heading)" % (os.path.relpath(f, ROOT), target))
    return bad


def test_links_between_docs_resolve():
    files = [os.path.join(ROOT, "README.md")] + sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))
    assert len(files) > 5
    assert broken(files) == []


def test_a_broken_anchor_is_found(tmp_path):
    doc = tmp_path / "a.md"
    doc.write_text("# Top heading\n\n## Same\n\n## Same\n\n[ok](#top-heading) [ok2](#same-1) "
                   "[no](#missing) [gone](b.md)\n")
    assert broken([str(doc)]) == ["%s: #missing (no such heading)" % os.path.relpath(str(doc), ROOT),
                                  "%s: b.md (no such file)" % os.path.relpath(str(doc), ROOT)]
