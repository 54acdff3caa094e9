#!/usr/bin/env python3
"""README.md from nbs/index.ipynb, and the hooks MkDocs calls while it builds the documentation site (issue 56).

    python tools/docs.py readme             # README.md from nbs/index.ipynb (what `nbdev_readme` does, without Quarto)
    python tools/docs.py readme --check     # exit 1 when README.md is not the index's rendering
    mkdocs build                            # the site in _docs/ (`make docs`): mkdocs.yml names this file as its hooks
    python tools/docs.py execute NB OUT     # (the hooks call it) one notebook executed as `nbdev_test` does, outputs kept

The site is built by MkDocs with Material (sidebar, search, highlighted code) and mkdocs-jupyter (notebooks as pages);
mkdocs.yml says why that tool. This file writes no HTML: it does only what none of those tools does for an nbdev project.
- **Execution**, with nbdev's own rules (execnb, as `nbdev_test`: `#| eval: false` and the settings.ini `tst_flags` cells
  are skipped, working directory nbs/), each notebook in its own process, into a cache keyed by the notebook's content
  (`.cache/docs-executed/`, git-ignored): an unchanged notebook is not executed again. A cell that raises shows its
  error on the page, and the build lists the notebooks that raised.
- **nbdev's page conventions** on a copy of each notebook (`.cache/docs-pages/`): `#| hide` cells dropped, `#| ...`
  directive lines removed, the executed default-run notebooks under reports/ linked from each study's page.
- **Links written for GitHub**: in nbs/index.ipynb relative to the repository root (it becomes README.md), elsewhere
  relative to nbs/. A link to a page becomes that page; to any other repository file, its `git_url` (settings.ini)
  blob URL; to a file that does not exist, an error naming the page and the link (the build fails).
- **The API reference** (api/*.md, generated in memory): per module of silverspoon/_modidx.py, each exported function,
  class and method with its signature, docstring and docments parameter table (nbdev's `show_doc` markdown), anchored
  by its name in lower case as nbdev anchors it (`api/runner.html#verify_provenance`).

Environment knobs (the CI test builds a subset): SILVERSPOON_DOCS_PAGES=stem,stem keeps only those notebooks (every
guide and the API reference stay); SILVERSPOON_DOCS_EXECUTE=all (default) | none | stem,stem: which notebooks execute.
"""
from __future__ import annotations
import argparse, configparser, hashlib, html, importlib, json, os, re, subprocess, sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NBS = ROOT/"nbs"
INDEX = NBS/"index.ipynb"
README_LIMIT_BYTES = 10_500   # issue 33: "at most ~10 KB"
CACHE = ROOT/".cache"
EXECUTED = CACHE/"docs-executed"   # <stem>-<sha256 of the notebook, 16 hex>.ipynb: the notebook with its outputs
PREPARED = CACHE/"docs-pages"      # what mkdocs-jupyter renders (never executed again)
CACHE_VERSION = "3"                # bump when `execute_notebook` changes what it writes

# ---------------------------------------------------------------- README
def directives_removed(source:str)->str:
    "A code cell's source without its `#| ...` directive lines (nbdev and Quarto strip them from rendered pages too)."
    return "\n".join(l for l in source.splitlines() if not l.lstrip().startswith("#|")).strip("\n")

def cell_source(c:dict)->str: return "".join(c["source"]) if isinstance(c["source"], list) else c["source"]

def notebook_markdown(nb_path:Path)->str:
    "A notebook as GitHub markdown: markdown cells as written, code cells as ```python blocks, outputs left out."
    nb = json.loads(nb_path.read_text(encoding="utf-8"))
    parts = []
    for c in nb["cells"]:
        src = cell_source(c)
        if c["cell_type"] == "markdown": parts.append(src.strip("\n"))
        elif c["cell_type"] == "code" and (body := directives_removed(src)): parts.append(f"```python\n{body}\n```")
    return "\n\n".join(parts) + "\n"

GENERATED = "<!-- Generated from nbs/index.ipynb by `make readme` (tools/docs.py): edit the notebook, not this file. -->\n\n"

def readme_text()->str: return GENERATED + notebook_markdown(INDEX)

def settings()->configparser.SectionProxy:
    cp = configparser.ConfigParser(); cp.read(ROOT/"settings.ini"); return cp["DEFAULT"]

def blob_base()->str:
    cfg = settings(); return f"{cfg['git_url']}/blob/{cfg.get('branch', 'main')}"

# ---------------------------------------------------------------- links
def resolve_link(href:str, page:Path, pages_by_path:dict[Path,str], blob:str)->str|None:
    """Where `href` (a link written in `page`) points on the site: a page's URL, a blob URL for another repository file,
    unchanged for external links and anchors; None when it names a file that does not exist."""
    if re.match(r"^[a-z][a-z0-9+.-]*:", href) or href.startswith("#"): return href
    path, _, anchor = href.partition("#")
    base = ROOT if page == INDEX else page.parent
    target = (base/path).resolve()
    if target in pages_by_path: return pages_by_path[target] + (f"#{anchor}" if anchor else "")
    if not target.exists() or ROOT not in target.parents: return None
    return f"{blob}/{target.relative_to(ROOT).as_posix()}" + (f"#{anchor}" if anchor else "")

# a markdown link or image `[text](href "title")`, or an HTML `href="..."`/`src="..."`
LINK = re.compile(r'(?P<md>\]\()(?P<mdhref>[^)\s]+)(?=(\s+"[^"]*")?\))|(?P<attr>(?:href|src)=")(?P<attrhref>[^"]*)(?=")')

def links_rewritten(markdown:str, page:Path, pages_by_path:dict[Path,str], blob:str, broken:list[str])->str:
    "`markdown` with every relative link resolved by `resolve_link`; links to missing files are appended to `broken`."
    def fix(m):
        href = m.group("mdhref") or m.group("attrhref") or ""
        new = resolve_link(html.unescape(href), page, pages_by_path, blob)
        if new is None:
            broken.append(f"{page.relative_to(ROOT) if ROOT in page.parents else page}: {href}"); return m.group(0)
        return (m.group("md") or m.group("attr")) + new
    return LINK.sub(fix, markdown)

def study_runs()->dict[str, list[Path]]:
    "Per study notebook (e.g. `10_normative`): the executed notebooks of its default runs, reports/<study>/<run>.ipynb."
    sys.path.insert(0, str(ROOT))
    from silverspoon.studies import STUDY_REGISTRY, get_study
    out = {}
    for name in STUDY_REGISTRY:
        nb = Path(get_study(name).notebook).stem
        out.setdefault(nb, []).extend(sorted((ROOT/"reports"/name).glob("*.ipynb")))
    return out

# ---------------------------------------------------------------- execution
def notebook_key(nb:Path)->str: return hashlib.sha256(CACHE_VERSION.encode() + nb.read_bytes()).hexdigest()[:16]

def executed_path(nb:Path)->Path: return EXECUTED/f"{nb.stem}-{notebook_key(nb)}.ipynb"

def execute_notebook(nb:Path, out:Path)->int:
    """Execute `nb` as `nbdev_test` does (execnb in this process, cwd the notebook's folder, `#| eval: false` and the
    `tst_flags` cells skipped) but without stopping at an error, and write it with its outputs to `out`.
    Returns the number of cells that raised."""
    from execnb.shell import CaptureShell
    from fastcore.xtras import working_directory
    from nbdev.process import NBProcessor
    from nbdev.frontmatter import FrontmatterProc
    os.environ["IN_TEST"] = "1"
    flags = set(settings().get("tst_flags", "").split())
    nb_obj = NBProcessor(nb, procs=FrontmatterProc, process=True).nb
    def no_eval(cell):
        if cell.cell_type != "code" or "nbdev_export" + "(" in cell.source: return True
        direc = getattr(cell, "directives_", {}) or {}
        return direc.get("eval:", [""])[0].lower() == "false" or bool(flags & direc.keys())
    shell = CaptureShell(nb)
    with working_directory(nb.parent): shell.run_all(nb_obj, exc_stop=False, preproc=no_eval)
    errors = sum(any(o.get("output_type") == "error" for o in c.get("outputs", [])) for c in nb_obj.cells)
    # the outputs go into the notebook as written (NBProcessor turned its title cell into front matter; it keeps every code
    # cell, in order)
    outputs = [c.get("outputs", []) for c in nb_obj.cells if c.cell_type == "code"]
    raw = json.loads(nb.read_text(encoding="utf-8"))
    code = [c for c in raw["cells"] if c["cell_type"] == "code"]
    assert len(code) == len(outputs), f"{nb}: {len(code)} code cells, {len(outputs)} executed"
    for c, o in zip(code, outputs): c["outputs"] = json.loads(json.dumps(o, default=str))
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp"); tmp.write_text(json.dumps(raw, indent=1), encoding="utf-8"); tmp.replace(out)
    return errors

def execute_all(notebooks:list[Path], workers:int=2)->list[str]:
    "Execute each notebook not in the cache, `workers` processes at a time; returns a line per notebook that raised."
    todo = [nb for nb in notebooks if not executed_path(nb).exists()]
    def one(nb):
        r = subprocess.run([sys.executable, str(Path(__file__).resolve()), "execute", str(nb), str(executed_path(nb))],
                           capture_output=True, text=True)
        print(f"docs: executed {nb.name} (rc {r.returncode})", file=sys.stderr)
        return None if r.returncode == 0 else f"{nb.name}: {(r.stdout + r.stderr).strip().splitlines()[-1:]}"
    with ThreadPoolExecutor(max(1, workers)) as ex: return [m for m in ex.map(one, todo) if m]

# ---------------------------------------------------------------- pages
def directives(source:str)->dict[str,str]:
    "The `#| name: value` directives of a code cell (nbdev's syntax), name -> value ('' for a bare flag)."
    out = {}
    for l in source.splitlines():
        if l.lstrip().startswith("#|"):
            name, _, value = l.lstrip()[2:].strip().partition(" ")
            out[name.rstrip(":")] = value.strip()
    return out

def prepared_notebook(src:Path, nb_file:Path, pages_by_path:dict[Path,str], blob:str, broken:list[str], runs:list[Path]|None)->dict:
    """The page mkdocs-jupyter renders for notebook `src` (`nb_file`: it, or its executed copy): nbdev's conventions
    (`#| hide` and `#| include: false` cells dropped, directive lines removed), links resolved, and for a study notebook
    a last section linking the executed notebooks of its default runs."""
    nb = json.loads(nb_file.read_text(encoding="utf-8"))
    cells = []
    for c in nb["cells"]:
        s = cell_source(c)
        if c["cell_type"] == "markdown": c["source"] = links_rewritten(s, src, pages_by_path, blob, broken)
        elif c["cell_type"] == "code":
            d = directives(s)
            if "hide" in d or d.get("include") == "false": continue
            c["source"] = directives_removed(s)
            if not c["source"] and not c.get("outputs"): continue
        cells.append(c)
    if runs is not None:
        links = "\n".join(f"- [`{r.relative_to(ROOT).as_posix()}`]({blob}/{r.relative_to(ROOT).as_posix()})" for r in runs)
        cells.append({"cell_type": "markdown", "metadata": {}, "source":
                      "## Executed default runs\n\nThis notebook as each default run executed it, outputs included:\n\n" + (links or "- none committed")})
    nb["cells"] = cells
    return nb

def api_markdown(module:str, names:list[str], source_nb:str|None)->str:
    """The API page of one module: for each exported name (`Class.method` too), nbdev's `show_doc` markdown (heading,
    signature, docstring) and its docments as a table (parameter, type, default, details)."""
    from fastcore.docments import docments
    from nbdev.showdoc import BasicMarkdownRenderer
    mod = importlib.import_module(module)
    out = [f"# {module}\n", f"Exported from [{source_nb}](../{source_nb}) by `nbdev_export`.\n" if source_nb else ""]
    for full in names:
        name = full[len(module) + 1:]
        obj = mod
        for part in name.split("."): obj = getattr(obj, part)
        md = BasicMarkdownRenderer(obj, name=name, title_level=3 if "." not in name else 4)._repr_markdown_()
        md = re.sub(r"^\[source\]\([^)]*\)\{[^}]*\}\n\n", "", md.removeprefix("---\n\n"), flags=re.M)   # nbdev's link has no line number here
        out.append(md.strip() + "\n")
        try: params = docments(obj, full=True, returns=False)
        except Exception: params = {}
        rows = [(p, v) for p, v in params.items() if p not in ("self", "cls")]
        if rows:
            out.append("| Parameter | Type | Default | Details |\n|---|---|---|---|\n" + "\n".join(
                f"| `{p}` | {_cell(v.get('anno'))} | {_cell(v.get('default'))} | {_details(v.get('docment'))} |"
                for p, v in rows) + "\n")
    return "\n".join(out)

def _details(s)->str: return (s or '').replace('|', '\\|').replace('\n', ' ')

def _cell(v)->str:
    import inspect
    if v is None or v is inspect._empty: return ""
    s = v if isinstance(v, str) else getattr(v, "__name__", None) or repr(v)
    return f"`{str(s).replace('|', '¦')}`"

def api_modules()->dict[str, list[str]]:
    "Module -> its exported public names (`_private` ones left out), from silverspoon/_modidx.py (what nbdev_export wrote)."
    sys.path.insert(0, str(ROOT))
    from silverspoon._modidx import d
    public = lambda n: not any(p.startswith("_") for p in n.split(".")[-2:])   # nbdev exports private helpers too
    return {m: names for m, syms in d["syms"].items() if (names := [n for n in syms if public(n[len(m) + 1:])])}

def api_page(module:str)->str: return f"api/{module.removeprefix('silverspoon.')}.md"

def module_notebook(module:str)->str|None:
    "The notebook a module is exported from (the `File to edit:` line nbdev writes at the top of it)."
    f = ROOT/(module.replace(".", "/") + ".py")
    if not f.exists(): f = f.with_suffix("")/"__init__.py"
    m = re.search(r"File to edit: (?:\.\./)+nbs/(\S+?\.ipynb)", f.read_text(encoding="utf-8")[:500]) if f.exists() else None
    return m.group(1) if m else None

# ---------------------------------------------------------------- MkDocs hooks
def _only(var:str)->set[str]|None:
    v = os.environ.get(var, "all").strip()
    return None if v in ("", "all") else set() if v == "none" else set(v.split(","))

def _nav_pages(nav)->set[str]:
    out = set()
    for item in nav or []:
        v = list(item.values())[0] if isinstance(item, dict) else item
        out |= _nav_pages(v) if isinstance(v, list) else {v}
    return out

def on_config(config):
    "The nav of mkdocs.yml, with any notebook or guide it does not name appended to its last section, and the API pages."
    keep = _only("SILVERSPOON_DOCS_PAGES")
    named = _nav_pages(config["nav"])
    extra = [p.name for p in sorted(NBS.glob("*.ipynb")) + sorted(NBS.glob("guide_*.md")) if p.name not in named]
    def prune(nav):
        out = []
        for item in nav:
            k, v = (list(item.items())[0] if isinstance(item, dict) else (None, item))
            if isinstance(v, list): v = prune(v)
            elif keep is not None and v.endswith(".ipynb") and v != "index.ipynb" and Path(v).stem not in keep: continue
            out.append({k: v} if k else v)
        return out
    nav = config["nav"]
    library = next(v for item in nav if isinstance(item, dict) for k, v in item.items() if k == "Library")
    library.extend(extra)
    nav.append({"API reference": ["api/index.md"] + [{m.removeprefix("silverspoon."): api_page(m)} for m in api_modules()]})
    config["nav"] = prune(nav)
    if keep is not None:   # a subset build keeps its own rendering cache: mkdocs-jupyter evicts the entries a build does not use
        config["plugins"]["mkdocs-jupyter"].config["cache_dir"] = str(CACHE/"mkdocs-jupyter-subset")
    return config

def on_files(files, config):
    """Execute the notebooks (cache), point each notebook page at its prepared copy, drop the pages SILVERSPOON_DOCS_PAGES
    leaves out, add the API pages."""
    from mkdocs.structure.files import File
    keep, run = _only("SILVERSPOON_DOCS_PAGES"), _only("SILVERSPOON_DOCS_EXECUTE")
    for f in list(files):
        if f.src_uri.endswith(".ipynb") and f.src_uri != "index.ipynb" and keep is not None and Path(f.src_uri).stem not in keep:
            files.remove(f)
    nbs = [NBS/f.src_uri for f in files if f.src_uri.endswith(".ipynb")]
    to_run = [nb for nb in nbs if nb != INDEX and (run is None or nb.stem in run)]
    failed = execute_all(to_run, workers=int(os.environ.get("SILVERSPOON_DOCS_WORKERS", "2")))
    if failed: print("docs: notebooks that did not execute:\n  " + "\n  ".join(failed), file=sys.stderr)
    blob, broken = blob_base(), []
    pages_by_path = {(NBS/f.src_uri).resolve(): f.dest_uri for f in files if f.src_uri.endswith((".md", ".ipynb"))}
    runs = study_runs()
    PREPARED.mkdir(parents=True, exist_ok=True)
    for f in files:
        if not f.src_uri.endswith(".ipynb"): continue
        src = NBS/f.src_uri
        ex = executed_path(src)
        nb = prepared_notebook(src, ex if ex.exists() else src, pages_by_path, blob, broken, runs.get(src.stem))
        out = PREPARED/f.src_uri; out.write_text(json.dumps(nb, indent=1), encoding="utf-8")
        f.abs_src_path = str(out)
        if hasattr(f, "file"): f.file.abs_src_path = str(out)   # mkdocs-jupyter wraps the File
    mods = api_modules()
    index = ["# API reference\n", "Every function and class `nbdev_export` exports, by module, with its signature and parameters.\n"]
    for m, names in mods.items():
        nb = module_notebook(m)
        files.append(File.generated(config, api_page(m), content=api_markdown(m, names, nb if files.get_file_from_path(nb or "") else None)))
        index.append(f"- [{m}]({Path(api_page(m)).name}): " + ", ".join(f"`{n[len(m)+1:]}`" for n in names if "." not in n[len(m)+1:]))
    files.append(File.generated(config, "api/index.md", content="\n".join(index) + "\n"))
    config["_silverspoon_broken"] = broken
    return files

def on_page_markdown(markdown, page, config, files):
    "A guide's links to repository files that are not pages become blob URLs; links to missing files are recorded."
    src = NBS/page.file.src_uri
    if page.file.src_uri.startswith("api/") or not src.exists() or src.suffix == ".ipynb": return markdown   # a notebook's links: prepared_notebook
    pages_by_path = {(NBS/f.src_uri).resolve(): f.src_uri for f in files if f.src_uri.endswith((".md", ".ipynb"))}
    rel = {k: os.path.relpath(NBS/v, src.parent) for k, v in pages_by_path.items()}   # mkdocs resolves page links itself
    return links_rewritten(markdown, src, rel, blob_base(), config["_silverspoon_broken"])

def on_post_build(config):
    if config["_silverspoon_broken"]:
        from mkdocs.exceptions import PluginError
        raise PluginError("broken links (the file they name does not exist):\n" + "\n".join(config["_silverspoon_broken"]))

# ---------------------------------------------------------------- command line
def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("readme", help="write README.md from nbs/index.ipynb"); r.add_argument("--check", action="store_true")
    e = sub.add_parser("execute", help="execute one notebook as nbdev_test does, outputs kept"); e.add_argument("nb"); e.add_argument("out")
    a = ap.parse_args(argv)
    if a.cmd == "execute":
        errors = execute_notebook(Path(a.nb).resolve(), Path(a.out))
        print(f"{a.nb}: {errors} cell(s) raised"); sys.exit(1 if errors else 0)
    text = readme_text()
    if len(text.encode()) > README_LIMIT_BYTES:
        raise SystemExit(f"nbs/index.ipynb renders to {len(text.encode())} bytes, over {README_LIMIT_BYTES}: move detail to a docs page (nbs/guide_*.md).")
    if a.check:
        if (ROOT/"README.md").read_text(encoding="utf-8") != text:
            raise SystemExit("README.md is not the rendering of nbs/index.ipynb: edit the notebook, then `make readme`.")
        print("README.md is the rendering of nbs/index.ipynb"); return
    (ROOT/"README.md").write_text(text, encoding="utf-8"); print(f"README.md written ({len(text.encode())} bytes)")

if __name__ == "__main__": main()
