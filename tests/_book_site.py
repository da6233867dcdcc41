"""Build the book's HTML from executed chapter notebooks, and read it in headless Chromium.

Used by tests/test_browser.py. The build is the real book (same _config.yml, _toc.yml, pages and
Sphinx extension) with execution switched off: the chapters are the notebooks that
tests/test_notebooks.py already ran in the quick profile, so the check costs a Sphinx build
(under a minute), not a second execution of the book.
"""

from __future__ import annotations

import contextlib
import functools
import http.server
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import urllib.parse
import urllib.request
from collections.abc import Iterator, Mapping
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
BOOK = ROOT / "book"
QUICK = ROOT / "_build" / "quick"  # executed quick-profile chapters: QUICK/<stem>/<stem>.ipynb (+ results/)
CHROMIUM = os.environ.get("KMT_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("KMT_CHROMEDRIVER", "/usr/bin/chromedriver")
CHROMIUM_FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-dev-shm-usage", "--window-size=1280,1000",
)


def chapter_stems() -> list[str]:
    return sorted(p.stem for p in BOOK.glob("[0-9]*.md"))


def executed_notebook(stem: str) -> Path:
    return QUICK / stem / f"{stem}.ipynb"


def run_chapter(source, out: Path, parameters: Mapping, *, cwd: Path = BOOK, timeout: int = 600) -> Path:
    """Run one chapter under papermill into ``out/<stem>.ipynb``; ``source`` is a ``book/*.md`` path (read
    through jupytext) or an ``.ipynb``. Returns the executed notebook's path."""
    import jupytext
    import papermill as pm

    source = Path(source)
    out.mkdir(parents=True, exist_ok=True)
    target = out / f"{source.stem}.ipynb"
    pm.execute_notebook(
        jupytext.read(source) if source.suffix == ".md" else str(source),
        str(target),
        parameters=dict(parameters),
        kernel_name="python3",
        cwd=str(cwd),
        progress_bar=False,
        execution_timeout=timeout,
    )
    return target


RUN_VARIABLE = "KMT_TEST_RUN"
"""An identifier of one test run, set by tests/conftest.py in the controlling process and inherited by
pytest-xdist's workers: what a worker finds stamped with it was made in this run, by any worker."""


def _this_run() -> str:
    return os.environ.get(RUN_VARIABLE, f"pid-{os.getpid()}")


def _lock(name: str):
    from filelock import FileLock

    QUICK.mkdir(parents=True, exist_ok=True)
    return FileLock(str(QUICK / f".{name}.lock"))


def exclusive(name: str):
    """A lock that one test holds while it uses something every worker shares (a file of the repository, the
    single-node Slurm): held, no test of another worker that asks for it runs; the ``xdist_group`` marks
    that send such tests to one worker only save the waiting, they are not what keeps them apart."""
    return _lock(name)


def quick_parameters(stem: str, out: Path) -> dict:
    """The quick-profile parameters of a chapter's test run (tests/chapter_cases.py), output under ``out``."""
    from chapter_cases import CASES

    parameters, _ = CASES[f"{stem}.md"]
    return {"device": os.environ.get("KMT_DEVICE", "cpu"), "profile": "quick", "seed": 11,
            "output_dir": str(out / "results"), **parameters}


def quick_chapter(stem: str, *, reuse_earlier: bool = False) -> Path:
    """The chapter's quick-profile run of this test run, in ``QUICK/<stem>/`` (notebook and results): run by
    whichever test asks first, on whichever worker, while the others wait on its lock and then read it.
    ``reuse_earlier`` also takes a run of an earlier test run that is newer than the chapter's source (the
    browser tests run on their own, when this run does not run the chapter's own test)."""
    out = QUICK / stem
    stamp = out / ".test-run"
    with _lock(stem):
        notebook = executed_notebook(stem)
        if stamp.is_file() and stamp.read_text() == _this_run():
            return out
        source = BOOK / f"{stem}.md"
        if reuse_earlier and notebook.is_file() and notebook.stat().st_mtime >= source.stat().st_mtime:
            return out
        shutil.rmtree(out, ignore_errors=True)
        run_chapter(source, out, quick_parameters(stem, out))
        stamp.write_text(_this_run())
    return out


def quick_site(fresh: set[str]) -> Path:
    """The book built from every chapter's quick run (``QUICK/site``), once per test run: the first worker to
    ask builds it, the others wait and read it. ``fresh``: the chapters this run runs itself (their
    tests are selected), whose runs the site must be made of; the others may be an earlier run's."""
    site = QUICK / "site"
    stamp = QUICK / ".site-run"
    with _lock("site"):
        if stamp.is_file() and stamp.read_text() == _this_run() and (site / "_build" / "html").is_dir():
            return site / "_build" / "html"
        stamp.unlink(missing_ok=True)
        staged = QUICK / "site-notebooks"
        shutil.rmtree(staged, ignore_errors=True)
        staged.mkdir(parents=True)
        notebooks = {}
        # last chapter first: tests/test_notebooks.py runs them from the first, so on two workers each chapter
        # is run by one of them while the other runs another, never waited on by both
        for stem in reversed(chapter_stems()):
            quick_chapter(stem, reuse_earlier=stem not in fresh)
            # copied under the chapter's lock: a later run of the chapter cannot change it under the build
            with _lock(stem):
                notebooks[stem] = Path(shutil.copy2(executed_notebook(stem), staged / f"{stem}.ipynb"))
        html = build_site(notebooks, site)
        stamp.write_text(_this_run())
    return html


def build_site(notebooks: Mapping[str, Path], dest: Path, timeout: float = 1200, allow_missing: bool = False) -> Path:
    """Build the book into ``dest`` with the given executed notebooks as chapters; return the HTML folder.

    Runs ``jupyter-book build -W -n --keep-going --all`` (warnings are errors, as in the real build).
    ``allow_missing`` drops chapters without a notebook from the table of contents (for trying out
    pages by hand; the tests never set it)."""
    if dest.exists():
        shutil.rmtree(dest)
    _copy_book_without_chapters(dest)
    missing = sorted(set(chapter_stems()) - set(notebooks))
    if missing and not allow_missing:
        raise RuntimeError(f"no executed notebook for chapter(s) {missing}")
    if missing:
        toc = (dest / "_toc.yml").read_text()
        toc = "".join(ln for ln in toc.splitlines(keepends=True) if not any(f"book/{m}" in ln for m in missing))
        (dest / "_toc.yml").write_text(toc)
    for stem, path in notebooks.items():
        shutil.copy2(path, dest / "book" / f"{stem}.ipynb")
    return _run_jupyter_book(dest, timeout)


def _copy_book_without_chapters(dest: Path) -> None:
    """The book's configuration (execution off, the rerun boxes naming the chapters' ``.md``), table of
    contents, references and every file of ``book/`` but the chapters, into ``dest``."""
    (dest / "book").mkdir(parents=True)
    for name in ("_toc.yml", "references.bib"):
        shutil.copy2(ROOT / name, dest / name)
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    config.setdefault("execute", {})["execute_notebooks"] = "off"
    config.setdefault("sphinx", {}).setdefault("config", {})["kmt_chapter_suffix"] = ".md"
    (dest / "_config.yml").write_text(yaml.safe_dump(config, sort_keys=False))
    # the library's source, which chapters show with literalinclude (`../kmtlib/...`)
    shutil.copytree(ROOT / "kmtlib", dest / "kmtlib", ignore=shutil.ignore_patterns("__pycache__", "*.pt", "*.md"))
    for item in BOOK.iterdir():
        if re.match(r"\d", item.name) and item.suffix == ".md":
            continue
        if item.name.startswith(".") or item.suffix == ".ipynb":
            continue
        target = dest / "book" / item.name
        if item.is_dir():
            shutil.copytree(item, target)
        else:
            shutil.copy2(item, target)


def _run_jupyter_book(dest: Path, timeout: float) -> Path:
    """``jupyter-book build -W -n --keep-going --all`` of the book at ``dest``; the HTML folder."""
    exe = Path(sys.executable).parent / "jupyter-book"
    cmd = [str(exe) if exe.exists() else "jupyter-book", "build", str(dest), "-W", "-n", "--keep-going", "--all"]
    env = {k: v for k, v in os.environ.items() if k != "MPLBACKEND"}
    proc = subprocess.run(cmd, cwd=dest, env=env, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"book build failed (rc={proc.returncode}):\n{proc.stdout[-6000:]}\n{proc.stderr[-4000:]}")
    html = dest / "_build" / "html"
    if not (html / "index.html").is_file():
        raise RuntimeError(f"the build reported success but {html / 'index.html'} is missing")
    # The whole book as one PDF from the same execution, as the book command makes it (its index links it).
    from kmtbook import book_pdf

    chromium, chromedriver = book_pdf.find_chromium(), book_pdf.find_chromedriver()
    if chromium is not None and chromedriver is not None:
        book_pdf.make_pdf(dest, dest, chromium, chromedriver)
    return html


# --------------------------------------------------------------------------- serving and the browser


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:  # keep pytest output clean
        pass


@contextlib.contextmanager
def serve(folder: Path) -> Iterator[str]:
    """Serve ``folder`` on the loopback interface; yields the base URL."""
    handler = functools.partial(_QuietHandler, directory=str(folder))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


def browser_missing_reason() -> str | None:
    for path in (CHROMIUM, CHROMEDRIVER):
        if not Path(path).exists():
            return f"{path} not found (Debian: apt-get install chromium chromium-driver)"
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "the Python package selenium is not installed (project extra 'test')"
    return None


@contextlib.contextmanager
def chromium() -> Iterator:
    """A headless Chromium driven by selenium through the system chromedriver (no download)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    os.environ.setdefault("SE_OFFLINE", "true")  # never let Selenium Manager reach for the network
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    profile = tempfile.mkdtemp(prefix="kmt-chromium-")
    for flag in (*CHROMIUM_FLAGS, f"--user-data-dir={profile}"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(60)
    driver.set_script_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


# What one page looks like once loaded and typeset; returned to Python as JSON.
PAGE_PROBE = r"""
const done = arguments[arguments.length - 1];
const typeset = (window.MathJax && MathJax.startup && MathJax.startup.promise)
  ? MathJax.startup.promise : Promise.resolve();
// a lazily loaded image (the figures page's thumbnails) is asked for now, so that every image is read
const lazy = [...document.querySelectorAll('img[loading="lazy"]')];
lazy.forEach(i => { i.loading = 'eager'; });
const settle = Promise.all([typeset, ...lazy.map(i => i.complete ? null
  : new Promise(r => { i.addEventListener('load', r); i.addEventListener('error', r); }))]);
Promise.race([settle, new Promise(r => setTimeout(r, 30000))]).then(() => {
  const imgs = [...document.images];
  const mathEls = [...document.querySelectorAll('.math')];
  const inMain = el => el.closest('main, article, .bd-article') !== null;
  const links = [...document.querySelectorAll('a[href]')].map(a => a.href);
  const xrefs = [...document.querySelectorAll('.xref')].filter(el => !el.closest('a'));
  done({
    title: document.title,
    mathjax: !!(window.MathJax && MathJax.version),
    mathjaxVersion: window.MathJax && MathJax.version || null,
    brokenImages: imgs.filter(i => !i.complete || i.naturalWidth === 0).map(i => i.getAttribute('src')),
    figures: [...document.querySelectorAll('figure')].map(f => {
      const img = f.querySelector('img');
      return {id: f.id, ok: !!img && img.complete && img.naturalWidth > 0,
              caption: (f.querySelector('figcaption') || {}).textContent || '',
              number: (f.querySelector('.caption-number') || {}).textContent || ''};
    }),
    ids: [...document.querySelectorAll('[id]')].map(e => e.id),
    mathTotal: mathEls.length,
    mathUnrendered: mathEls.filter(e => !e.querySelector('mjx-container')).map(e => e.textContent.slice(0, 80)),
    mathErrors: [...document.querySelectorAll('mjx-merror')].map(e => e.textContent.slice(0, 80)),
    unresolvedXrefs: xrefs.map(e => e.textContent.slice(0, 80)),
    questionMarks: [...document.querySelectorAll('main a, article a')]
      .filter(a => /^\?\?$|^Fig\. \?/.test(a.textContent.trim())).map(a => a.textContent),
    links: links,
    external: [...document.querySelectorAll('script[src], link[rel=stylesheet][href], img[src]')]
      .map(e => e.src || e.href).filter(u => u && !u.startsWith(location.origin) && !u.startsWith('data:')),
    rerunBox: (document.querySelector('.kmt-rerun') || {}).textContent || '',
    overview: ([...document.querySelectorAll('.admonition')].find(
      a => /in this chapter/i.test((a.querySelector('.admonition-title') || {}).textContent || ''))
      || {}).textContent || '',
    rerunAfterOverview: (() => {
      const box = document.querySelector('.kmt-rerun');
      const prev = box && box.previousElementSibling;
      return !!prev && /in this chapter/i.test((prev.querySelector('.admonition-title') || {}).textContent || '');
    })(),
    notebookDownload: [...document.querySelectorAll('a[href$=".ipynb"]')].map(a => a.href),
    mainText: (document.querySelector('main') || document.body).innerText,
    // a table cell pandas cut short ("... 2 threads (th...")
    cutCells: [...document.querySelectorAll('main td, article td')].map(td => td.innerText.trim())
      .filter(t => t.length > 3 && /[^.]\.\.\.$/.test(t)).map(t => t.slice(-60)),
    pageCite: [...document.querySelectorAll('.kmt-cite-page')].map(p => p.innerText),
    figureCites: [...document.querySelectorAll('figure[id]')].map(f => {
      // the line "Cite this figure" follows the figure
      let next = f.nextElementSibling;
      const line = next && next.classList.contains('kmt-cite-figure') ? next : null;
      return {id: f.id, text: line ? line.innerText : null,
              links: line ? [...line.querySelectorAll('a[href]')].map(a => a.href) : []};
    }),
    // the gallery of the figures page: per chapter a heading and a grid of cards
    gallery: [...document.querySelectorAll('.kmt-gallery-grid')].map(grid => ({
      chapter: (grid.previousElementSibling || {}).innerText || '',
      cards: [...grid.querySelectorAll('.kmt-gallery-card')].map(card => {
        const img = card.querySelector('img.kmt-thumbnail');
        return {text: card.innerText.trim(),
                thumbnail: img ? {loaded: img.complete && img.naturalWidth > 0,
                                  width: img.getBoundingClientRect().width,
                                  href: (img.closest('a') || {}).href || null} : null};
      }),
    })),
    pageHeight: document.body.scrollHeight,
    // maths that MathJax never saw: TeX left in a table cell (a pandas table with "$d_{emb}$")
    rawMathInTables: [...document.querySelectorAll('main td, main th, article td, article th')]
      .map(c => c.innerText).filter(t => /\$[^$\s][^$]*\$|\\(frac|gamma|mathbb|mathcal)\b|\b\w+_\{/.test(t))
      .map(t => t.slice(0, 60)),
    // A parameter table is clipped when it reaches past the content column, needs a horizontal scroll
    // bar in its container, or a cell's text overflows the cell.
    parameterTables: [...document.querySelectorAll('table.kmt-parameters')].map(t => {
      const column = (t.closest('article, main, .bd-article') || document.body).getBoundingClientRect();
      const box = t.getBoundingClientRect();
      const holder = t.closest('.pst-scrollable-table-container') || t.parentElement;
      const clipped = [];
      if (box.right > column.right + 1 || box.left < column.left - 1) {
        clipped.push(`the table spans ${box.left.toFixed(0)}-${box.right.toFixed(0)} px, ` +
                     `the content column ${column.left.toFixed(0)}-${column.right.toFixed(0)} px`);
      }
      if (holder.scrollWidth > holder.clientWidth + 1) {
        clipped.push(`its container scrolls sideways ` +
                     `(${holder.scrollWidth} px of content in ${holder.clientWidth} px)`);
      }
      for (const cell of t.querySelectorAll('th, td')) {
        if (cell.scrollWidth > cell.clientWidth + 1) {
          clipped.push(`cell ${JSON.stringify(cell.innerText.slice(0, 40))} overflows ` +
                       `(${cell.scrollWidth} px in ${cell.clientWidth} px)`);
        }
      }
      return {rows: t.querySelectorAll('tbody tr').length, visible: box.width > 0 && box.height > 0,
              header: [...t.querySelectorAll('thead th')].map(th => th.innerText.trim()),
              width: box.width, clipped: clipped};
    }),
  });
});
"""


def probe(driver, url: str, redirects_to: str | None = None) -> dict:
    """Load ``url`` (and, for a redirect page, wait until the browser lands on ``redirects_to``);
    return what the page shows once MathJax has finished, plus the console's errors."""
    driver.get(url)
    if redirects_to is not None:
        from selenium.webdriver.support.ui import WebDriverWait

        WebDriverWait(driver, 20).until(
            lambda d: (
                d.current_url.split("#")[0].endswith(redirects_to)
                and d.execute_script("return document.readyState") == "complete"
            )
        )
    result = driver.execute_async_script(PAGE_PROBE)
    result["url"] = driver.current_url
    result["console"] = [entry for entry in driver.get_log("browser") if entry.get("level") == "SEVERE"]
    return result


def fetch(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as err:
        return err.code, b""


def split_link(url: str) -> tuple[str, str]:
    parts = urllib.parse.urldefrag(url)
    return parts.url, parts.fragment


def read_json(data: bytes) -> dict:
    return json.loads(data.decode("utf-8"))


# How the tables of a page sit in its content column, and which words a line break cut in two;
# returned to Python as JSON. A table is cut off when it reaches past the column with no scrolling
# container between them; it scrolls when its container has a horizontal scroll bar. A word is
# broken when its letters lie on more than one line (breaks at spaces, after hyphens and slashes
# are line breaks, not broken words). Pre-formatted blocks (commands, code) wrap as they must.
LAYOUT_PROBE = r"""
const main = document.querySelector('.bd-article, article, main') || document.body;
const column = main.getBoundingClientRect();
const scroller = el => {
  for (let a = el.parentElement; a && a !== main; a = a.parentElement) {
    const o = getComputedStyle(a).overflowX;
    if (o === 'auto' || o === 'scroll') return a;
  }
  return null;
};
const name = t => (t.className ? '.' + String(t.className).trim().split(/\s+/).join('.') : '') +
  ' ' + JSON.stringify((t.querySelector('th, td') || t).innerText.trim().slice(0, 30));
const tables = [...main.querySelectorAll('table')].filter(t => t.getBoundingClientRect().width > 0).map(t => {
  const box = t.getBoundingClientRect();
  const holder = scroller(t);
  const past = box.right > column.right + 1 || box.left < column.left - 1;
  return {table: name(t), width: Math.round(box.width), column: Math.round(column.width),
          height: Math.round(box.height), rows: t.querySelectorAll('tbody tr').length,
          cutOff: past && !holder,
          scrolls: !!holder && holder.scrollWidth > holder.clientWidth + 1,
          holder: holder ? `${holder.className}: ${holder.scrollWidth} px in ${holder.clientWidth} px` : null};
});
const broken = [];
const unwrapped = 'pre, script, style, mjx-container';
// the rerun box's commands wrap at their spaces only: a word there is checked too
const walker = document.createTreeWalker(main, NodeFilter.SHOW_TEXT, {acceptNode: n =>
  (n.parentElement.closest('table, .kmt-rerun') &&
   (!n.parentElement.closest(unwrapped) || n.parentElement.closest('.kmt-command')))
    ? NodeFilter.FILTER_ACCEPT : NodeFilter.FILTER_REJECT});
for (let n = walker.nextNode(); n && broken.length < 20; n = walker.nextNode()) {
  const re = /[^\s\-\/\u2010-\u2014\u200b]+/g;
  let m;
  while ((m = re.exec(n.data)) !== null) {
    if (m[0].length < 2) continue;
    const r = document.createRange();
    r.setStart(n, m.index);
    r.setEnd(n, m.index + m[0].length);
    const tops = new Set([...r.getClientRects()].filter(b => b.width > 0).map(b => Math.round(b.top / 4)));
    if (tops.size > 1) broken.push(m[0]);
  }
}
// every text output of a notebook cell: its box, how wide its text is, and whether the box scrolls
const outputs = [...main.querySelectorAll('div.cell_output pre')].filter(p => p.getBoundingClientRect().width > 0)
  .map(p => {
    const box = p.getBoundingClientRect();
    const o = getComputedStyle(p).overflowX;
    return {text: p.innerText.trim().split('\n')[0].slice(0, 50), scrollWidth: p.scrollWidth,
            clientWidth: p.clientWidth, overflows: p.scrollWidth > p.clientWidth + 1,
            ownScroll: o === 'auto' || o === 'scroll',
            pastColumn: box.right > column.right + 1};
  });
const figures = [...main.querySelectorAll('figure img')].filter(i => i.naturalHeight > 0).map(i => {
  // a wide figure's box of its own (kmtbook.sphinx_ext.assets.wide_figure_box) and the line above it
  const box = i.closest('.kmt-scroll'), cue = (i.closest('figure') || main).querySelector('.kmt-scroll-cue');
  return {id: (i.closest('figure') || {}).id || '', aspect: i.naturalWidth / i.naturalHeight,
          width: Math.round(i.getBoundingClientRect().width),
          box: box ? {scrolls: box.scrollWidth > box.clientWidth + 1, tabindex: box.getAttribute('tabindex'),
                      name: box.getAttribute('aria-label') || ''} : null,
          cueShown: !!cue && cue.getBoundingClientRect().height > 0};
});
return {tables: tables, brokenWords: broken, figures: figures, outputs: outputs,
        gallery: [...main.querySelectorAll('.kmt-gallery-grid')]
          .map(g => g.querySelectorAll('.kmt-gallery-card').length),
        pageHeight: document.body.scrollHeight,
        pageScrollsSideways: document.documentElement.scrollWidth > document.documentElement.clientWidth + 1};
"""


# The page and every resource it loads, once every lazy image has come into view: bytes and counts;
# ``own``: the page and what it loads for itself, without the theme's files that every page shares
# (``_static/``, the search index: loaded once and cached).
WEIGHT_PROBE = r"""
const done = arguments[arguments.length - 1];
const total = () => {
  const nav = performance.getEntriesByType('navigation')[0], res = performance.getEntriesByType('resource');
  const size = r => r.transferSize || r.encodedBodySize || 0;
  const own = res.filter(r => !/\/_static\/|\/searchindex\.js/.test(r.name));
  return {bytes: size(nav) + res.reduce((a, r) => a + size(r), 0), resources: res.length,
          own: size(nav) + own.reduce((a, r) => a + size(r), 0),
          images: res.filter(r => r.initiatorType === 'img').length};
};
const step = y => {
  if (y > document.body.scrollHeight) { setTimeout(() => done(total()), 1500); return; }
  window.scrollTo(0, y); setTimeout(() => step(y + 500), 100);
};
setTimeout(() => step(0), 1000);
"""


def page_weight(driver, url: str) -> dict:
    """Load ``url``, scroll through it (a lazy image loads near the window) and return the bytes of the
    page and of every resource it loaded (``bytes``; ``own``: without the theme's shared files), and
    how many resources and images."""
    driver.get(url)
    return driver.execute_async_script(WEIGHT_PROBE)


def layout(driver, url: str) -> dict:
    """Load ``url`` and return :data:`LAYOUT_PROBE`'s view of its tables and words."""
    driver.get(url)
    driver.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        "const s = (window.MathJax && MathJax.startup && MathJax.startup.promise) || Promise.resolve();"
        "Promise.race([s, new Promise(r => setTimeout(r, 30000))]).then(() => done(true));")
    return driver.execute_script(LAYOUT_PROBE)


def as_phone(driver, width: int = 390, height: int = 844) -> None:
    """Make the page viewport a phone's (CSS pixels, touch, mobile viewport rules)."""
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                           {"width": width, "height": height, "deviceScaleFactor": 3, "mobile": True})
