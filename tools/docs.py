#!/usr/bin/env python3
"""The README and the documentation site, built offline from `nbs/` (issue 33).

    python tools/docs.py readme             # README.md from nbs/index.ipynb (what `nbdev_readme` does, without Quarto)
    python tools/docs.py readme --check     # exit 1 when README.md is not the index's rendering
    python tools/docs.py site --out _docs   # every nbs/*.ipynb and nbs/*.md page as HTML, never executed; links checked

Why not `nbdev_docs`: it needs Quarto, and the `quarto-cli` package on PyPI is a source package whose build downloads
the Quarto binary from GitHub, which the project's machines and CI cannot reach (only package registries). This
builder uses nbconvert (already pinned in requirements.txt) and renders notebooks as committed, without executing them.

Links are written as on GitHub: in `nbs/index.ipynb` relative to the repository root (it becomes README.md), in every
other page relative to `nbs/`. On the site a link to a page becomes that page's HTML; a link to any other file of the
repository becomes its `git_url` (settings.ini) blob URL. A link to a file that does not exist is an error naming the
page and the link.
"""
from __future__ import annotations
import argparse, configparser, html, json, re, sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NBS = ROOT/"nbs"
INDEX = NBS/"index.ipynb"
README_LIMIT_BYTES = 10_500   # issue 33: "at most ~10 KB"

def directives_removed(source:str)->str:
    "A code cell's source without its `#| ...` directive lines (nbdev and Quarto strip them from rendered pages too)."
    return "\n".join(l for l in source.splitlines() if not l.lstrip().startswith("#|")).strip("\n")

def notebook_markdown(nb_path:Path)->str:
    "A notebook as GitHub markdown: markdown cells as written, code cells as ```python blocks, outputs left out."
    nb = json.loads(nb_path.read_text(encoding="utf-8"))
    parts = []
    for c in nb["cells"]:
        src = "".join(c["source"]) if isinstance(c["source"], list) else c["source"]
        if c["cell_type"] == "markdown": parts.append(src.strip("\n"))
        elif c["cell_type"] == "code" and (body := directives_removed(src)): parts.append(f"```python\n{body}\n```")
    return "\n\n".join(parts) + "\n"

GENERATED = "<!-- Generated from nbs/index.ipynb by `make readme` (tools/docs.py): edit the notebook, not this file. -->\n\n"

def readme_text()->str: return GENERATED + notebook_markdown(INDEX)

def settings()->configparser.SectionProxy:
    cp = configparser.ConfigParser(); cp.read(ROOT/"settings.ini"); return cp["DEFAULT"]

def pages()->list[Path]:
    "Every page of the site: the index first, then the guides, then the notebooks in their order."
    return [INDEX] + sorted(NBS.glob("guide_*.md")) + sorted(p for p in NBS.glob("*.ipynb") if p != INDEX)

def page_html_name(p:Path)->str: return p.stem + ".html"

def page_title(p:Path)->str:
    text = notebook_markdown(p) if p.suffix == ".ipynb" else p.read_text(encoding="utf-8")
    m = re.search(r"^# (.+)$", text, flags=re.M)
    return m.group(1).strip() if m else p.stem

def study_runs()->dict[str, list[Path]]:
    "Per study notebook (e.g. `10_normative`): the executed notebooks of its default runs, reports/<study>/<run>.ipynb."
    sys.path.insert(0, str(ROOT))
    from silverspoon.studies import STUDY_REGISTRY, get_study
    out = {}
    for name in STUDY_REGISTRY:
        nb = Path(get_study(name).notebook).stem
        out.setdefault(nb, []).extend(sorted((ROOT/"reports"/name).glob("*.ipynb")))
    return out

def resolve_link(href:str, page:Path, pages_by_path:dict[Path,str], blob:str)->str|None:
    """Where `href` (a link written in `page`) points on the site: a page's HTML, a blob URL for another repository file,
    unchanged for external links and anchors; None when it names a file that does not exist."""
    if re.match(r"^[a-z][a-z0-9+.-]*:", href) or href.startswith("#"): return href
    path, _, anchor = href.partition("#")
    base = ROOT if page == INDEX else page.parent
    target = (base/path).resolve()
    if target in pages_by_path: return pages_by_path[target] + (f"#{anchor}" if anchor else "")
    if not target.exists() or ROOT not in target.parents: return None
    return f"{blob}/{target.relative_to(ROOT).as_posix()}" + (f"#{anchor}" if anchor else "")

def render(p:Path, extra_markdown:str="")->str:
    """The body HTML of one page: markdown cells through mistune (nbconvert's markdown library, with tables), code cells
    as plain `<pre>` blocks; outputs left out and nothing executed. (nbconvert's HTML exporter takes ~25 s for one large
    notebook here, mostly sanitising and highlighting: too slow for a test that builds every page.)"""
    import mistune
    from mistune.plugins.table import table_in_list
    to_html = mistune.create_markdown(escape=False, plugins=["table", table_in_list, "strikethrough", "url"])
    if p.suffix == ".ipynb":
        nb = json.loads(p.read_text(encoding="utf-8"))
        cells = [("".join(c["source"]) if isinstance(c["source"], list) else c["source"], c["cell_type"]) for c in nb["cells"]]
    else: cells = [(p.read_text(encoding="utf-8"), "markdown")]
    if extra_markdown: cells.append((extra_markdown, "markdown"))
    out = []
    for src, kind in cells:
        if kind == "markdown": out.append(to_html(src))
        elif kind == "code" and (body := directives_removed(src)): out.append(f'<pre><code class="language-python">{html.escape(body)}</code></pre>')
    return with_heading_ids("\n".join(out))

def slug(text:str)->str:
    "GitHub's anchor of a heading: lower case, tags and punctuation dropped, spaces to hyphens."
    text = html.unescape(re.sub(r"<[^>]+>", "", text)).strip().lower()
    return re.sub(r"\s", "-", re.sub(r"[^\w\s-]", "", text))

def with_heading_ids(body:str)->str:
    "Each `<hN>` gets the id GitHub gives it, so a `page.md#section` link works on the site as on GitHub."
    return re.sub(r"<h([1-6])>(.*?)</h\1>", lambda m: f'<h{m.group(1)} id="{slug(m.group(2))}">{m.group(2)}</h{m.group(1)}>', body, flags=re.S)

CSS = """body{font-family:system-ui,sans-serif;max-width:1100px;margin:0 auto;padding:0 1.5em 3em;line-height:1.45}
nav{border-bottom:1px solid #ccc;padding:.6em 0;margin-bottom:1em;font-size:.9em}nav a{margin-right:.8em}
pre{background:#f6f8fa;padding:.6em;overflow-x:auto}table{border-collapse:collapse;display:block;overflow-x:auto}
td,th{border:1px solid #ddd;padding:.25em .5em;vertical-align:top}"""

def build_site(out:Path)->list[str]:
    "Write every page to `out`; returns the broken links found (page: link), empty when the site is whole."
    cfg = settings()
    blob = f"{cfg['git_url']}/blob/{cfg.get('branch', 'main')}"
    all_pages = pages()
    by_path = {p.resolve(): page_html_name(p) for p in all_pages}
    runs = study_runs()
    nav = "<nav>" + " ".join(f'<a href="{page_html_name(p)}">{html.escape(page_title(p) if p.suffix == ".md" or p == INDEX else p.stem)}</a>'
                             for p in all_pages if p == INDEX or p.suffix == ".md") + ' <a href="notebooks.html">Notebooks</a></nav>'
    out.mkdir(parents=True, exist_ok=True)
    broken = []
    for p in all_pages:
        extra = ""
        if p.stem in runs:
            links = "\n".join(f"- [`{r.relative_to(ROOT).as_posix()}`](../{r.relative_to(ROOT).as_posix()})" for r in runs[p.stem])
            extra = "## Executed default runs\n\nThis notebook as each default run executed it, outputs included:\n\n" + (links or "- none committed")
        body = render(p, extra)
        def fix(m):
            new = resolve_link(html.unescape(m.group(2)), p, by_path, blob)
            if new is None: broken.append(f"{p.relative_to(ROOT) if ROOT in p.parents else p}: {m.group(2)}"); return m.group(0)
            return f'{m.group(1)}="{html.escape(new)}"'
        body = re.sub(r'(<a\s[^>]*?href|<img\s[^>]*?src)="([^"]*)"', fix, body)
        title = html.escape(page_title(p))
        (out/page_html_name(p)).write_text(f'<!DOCTYPE html>\n<html><head><meta charset="utf-8"><title>{title} – silverspoon</title>'
                                           f"<style>{CSS}</style></head><body>{nav}\n{body}\n</body></html>\n", encoding="utf-8")
    rows = "\n".join(f'<li><a href="{page_html_name(p)}">{p.name}</a>: {html.escape(page_title(p))}</li>' for p in all_pages if p.suffix == ".ipynb")
    (out/"notebooks.html").write_text(f'<!DOCTYPE html>\n<html><head><meta charset="utf-8"><title>Notebooks – silverspoon</title><style>{CSS}</style></head>'
                                      f"<body>{nav}<h1>Notebooks</h1><ul>{rows}</ul></body></html>\n", encoding="utf-8")
    return broken

def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("readme", help="write README.md from nbs/index.ipynb"); r.add_argument("--check", action="store_true")
    s = sub.add_parser("site", help="build the documentation site"); s.add_argument("--out", default=str(ROOT/"_docs"))
    a = ap.parse_args(argv)
    if a.cmd == "readme":
        text = readme_text()
        if len(text.encode()) > README_LIMIT_BYTES:
            raise SystemExit(f"nbs/index.ipynb renders to {len(text.encode())} bytes, over {README_LIMIT_BYTES}: move detail to a docs page (nbs/guide_*.md).")
        if a.check:
            if (ROOT/"README.md").read_text(encoding="utf-8") != text:
                raise SystemExit("README.md is not the rendering of nbs/index.ipynb: edit the notebook, then `make readme`.")
            print("README.md is the rendering of nbs/index.ipynb"); return
        (ROOT/"README.md").write_text(text, encoding="utf-8"); print(f"README.md written ({len(text.encode())} bytes)")
    else:
        broken = build_site(Path(a.out))
        if broken: raise SystemExit("broken links (the file they name does not exist):\n" + "\n".join(broken))
        print(f"{a.out}: {len(pages()) + 1} pages")

if __name__ == "__main__": main()
