"""axe-core in the built book's pages: the WCAG 2.0 and 2.1 rules of levels A and AA, light and dark.

axe-core is the npm package pinned in tests/browser/package.json (and package-lock.json); the nox
``tests`` session installs it with ``npm ci`` before pytest runs, so the tests read it from disk and
reach no network. Without it the accessibility tests skip, except under CI (``CI`` set), where they
fail, as the browser tests do without Chromium (``_book_site.browser_missing_reason``).

Used by tests/test_browser.py: :func:`show_mode` opens a page in the theme's light or dark mode (as a
reader's choice of the theme's colour-mode button is kept: pydata-sphinx-theme's ``localStorage``
keys ``mode`` and ``theme``), and :func:`axe_violations` runs axe-core on it.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

BROWSER_PACKAGES = Path(__file__).resolve().parent / "browser"
AXE = BROWSER_PACKAGES / "node_modules" / "axe-core" / "axe.min.js"
WCAG_TAGS = ("wcag2a", "wcag2aa", "wcag21a", "wcag21aa")


def pinned_axe_version() -> str:
    """The axe-core version that tests/browser/package-lock.json pins."""
    lock = json.loads((BROWSER_PACKAGES / "package-lock.json").read_text())
    return lock["packages"]["node_modules/axe-core"]["version"]


def axe_missing_reason() -> str | None:
    """Why axe-core cannot be injected (None: it can): not installed, or not the pinned version."""
    if not AXE.is_file():
        npm = "npm" if shutil.which("npm") else "npm (Debian: apt-get install npm)"
        return f"{AXE} not found: run `{npm} ci` in {BROWSER_PACKAGES} (the nox tests session does)"
    installed = json.loads((AXE.parent / "package.json").read_text())["version"]
    if installed != pinned_axe_version():
        return f"axe-core {installed} is installed, the lock file pins {pinned_axe_version()}: run `npm ci` again"
    return None


# Waits until the page has finished what changes its look: the load, MathJax's typesetting, the
# theme's mode (its script sets data-mode once it runs) and the web fonts; then one frame more.
SETTLE = r"""
const done = arguments[arguments.length - 1];
const mode = arguments[0];
const typeset = (window.MathJax && MathJax.startup && MathJax.startup.promise) || Promise.resolve();
const loaded = document.readyState === 'complete' ? Promise.resolve()
  : new Promise(r => window.addEventListener('load', r, {once: true}));
const fonts = document.fonts ? document.fonts.ready : Promise.resolve();
const timeout = new Promise(r => setTimeout(r, 30000));
Promise.race([Promise.all([loaded, typeset, fonts]), timeout]).then(() => {
  requestAnimationFrame(() => requestAnimationFrame(() => {
    const html = document.documentElement;
    const background = getComputedStyle(document.body).backgroundColor;
    done({theme: html.dataset.theme || null, mode: html.dataset.mode || null, background: background,
          wanted: mode});
  }));
});
"""

AXE_RUN = r"""
const done = arguments[arguments.length - 1];
const tags = arguments[0];
axe.run(document, {runOnly: {type: 'tag', values: tags}, resultTypes: ['violations']})
  .then(r => done({version: axe.version, violations: r.violations.map(v => ({
     id: v.id, impact: v.impact, help: v.help,
     nodes: v.nodes.map(n => ({target: n.target.map(String).join(' '), html: n.html.slice(0, 200),
                               summary: (n.failureSummary || '').slice(0, 300)}))}))}))
  .catch(e => done({error: String(e)}));
"""


def show_mode(driver, url: str, mode: str) -> dict:
    """Open ``url`` in the theme's ``mode`` ("light" or "dark") as a reader who chose it with the
    theme's button: the choice is in ``localStorage`` before the page's first script reads it. Returns
    the theme the page shows and the body's background colour, once the page has settled."""
    driver.get(url)
    driver.execute_script("localStorage.setItem('mode', arguments[0]); localStorage.setItem('theme', arguments[0]);",
                          mode)
    driver.get(url)
    return driver.execute_async_script(SETTLE, mode)


def axe_violations(driver) -> dict:
    """Inject axe-core into the page the driver shows and run the WCAG 2.0/2.1 A and AA rules."""
    driver.execute_script(AXE.read_text(encoding="utf-8"))
    result = driver.execute_async_script(AXE_RUN, list(WCAG_TAGS))
    if "error" in result:
        raise RuntimeError(f"axe-core failed: {result['error']}")
    return result


def dark_background(rgb: str) -> bool:
    """Whether a CSS ``rgb(r, g, b)`` colour is dark (relative luminance under 0.2)."""
    parts = [float(x) for x in rgb[rgb.index("(") + 1:rgb.index(")")].split(",")[:3]]

    def linear(c: float) -> float:
        c /= 255
        return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4

    r, g, b = (linear(c) for c in parts)
    return 0.2126 * r + 0.7152 * g + 0.0722 * b < 0.2
