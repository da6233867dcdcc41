"""Sessions: `tests` and `book`, each for device cpu (default) or cuda; `bench` for the benchmarks;
`lint` for ruff and mypy.

torch is installed first from TORCH_SPEC (default: the pinned CPU wheel torch==2.13.0) and, if set,
TORCH_INDEX_URL; then the session's locked environment (requirements/<session>.txt, exact versions with
hashes, made by scripts/lock_requirements.py) and the project without its dependencies. CUDA users set
TORCH_SPEC and TORCH_INDEX_URL to a CUDA build, or run with `--no-venv` in an environment that has one.
"""

from __future__ import annotations

import os
import shutil

import nox

nox.options.sessions = ["tests(device='cpu')"]
nox.options.reuse_existing_virtualenvs = True
# uv would ignore the local CPU wheel and download a multi-GB CUDA torch.
nox.options.default_venv_backend = "virtualenv"

DEVICES = ["cpu", "cuda"]
CHECK_TORCH = (
    "import sys, torch; print('torch', torch.__version__, 'cuda available:', torch.cuda.is_available()); "
    "sys.exit(3 if sys.argv[1] == 'cuda' and not torch.cuda.is_available() else 0)"
)


# The extras installed from a lock (requirements/<session>.txt, CPU, Linux, Python 3.11; torch is not in it).
# KMT_UNLOCKED=1 installs the extra's ranges instead (another platform or Python, or to try newer versions).
LOCKS = {"book": "requirements/book.txt", "test": "requirements/tests.txt", "lint": "requirements/lint.txt"}


def _setup(session: nox.Session, device: str, extra: str) -> dict[str, str]:
    if device == "cuda" and shutil.which("nvidia-smi") is None:
        session.skip("device=cuda but no NVIDIA driver on this machine")
    if not isinstance(session.virtualenv, nox.virtualenv.PassthroughEnv):
        torch_args = [os.environ.get("TORCH_SPEC", "torch==2.13.0")]
        if os.environ.get("TORCH_INDEX_URL"):
            torch_args += ["--index-url", os.environ["TORCH_INDEX_URL"]]
        # --no-compile: pip would byte-compile every module of every package (a minute for torch
        # and the book's tool chain); Python compiles the few that are imported when first imported.
        session.install("--no-compile", *torch_args)
        lock = LOCKS.get(extra)
        if lock is not None and os.environ.get("KMT_UNLOCKED") != "1":
            # The locked environment (scripts/lock_requirements.py): every package at one version, checked
            # against its hashes; then the project itself, whose requirements the lock already holds.
            session.install("--no-compile", "--require-hashes", "-r", lock)
            session.install("--no-compile", "--no-deps", "-e", ".")
        else:
            session.install("--no-compile", "-e", f".[{extra}]")
    # Never set MPLBACKEND=Agg here: it strips figure outputs from the executed notebooks.
    env = {"KMT_DEVICE": device}
    if not isinstance(session.virtualenv, nox.virtualenv.PassthroughEnv):
        # The session's own environment keeps what Python compiles on first import, even where the
        # shell sets PYTHONDONTWRITEBYTECODE: every chapter's kernel would otherwise compile torch,
        # pandas and matplotlib again (seconds each).
        env["PYTHONDONTWRITEBYTECODE"] = ""
    session.run("python", "-c", CHECK_TORCH, device, env=env)
    return env


@nox.session
@nox.parametrize("device", DEVICES)
def tests(session: nox.Session, device: str) -> None:
    """Unit tests, papermill runs of every chapter (quick profile), and the browser check: a book built
    from those runs (execution off) read page by page in headless Chromium (tests/test_browser.py)."""
    env = _setup(session, device, "test")
    # axe-core, which the browser test injects into every page (WCAG 2.0/2.1 A and AA), at the version
    # tests/browser/package-lock.json pins; without npm the accessibility tests skip (fail under CI).
    if shutil.which("npm"):
        session.run("npm", "ci", "--prefix", "tests/browser", "--no-audit", "--no-fund", external=True)
    else:
        session.warn("npm not found: the accessibility tests will skip (they fail under CI)")
    # on every core (pytest-xdist): tests that share a file or a service carry an xdist_group and run on one
    # worker; the chapters' quick runs and the book built from them are made once (tests/_book_site.py).
    # `nox -s "tests(device='cpu')" -- -n 0` runs them in one process.
    # The 25 slowest tests are listed at the end.
    workers = ["-n", "auto", "--dist", "loadgroup"]
    session.run("python", "-m", "pytest", "-q", *workers, "--durations=25", *session.posargs, env=env)


@nox.session
@nox.parametrize("device", DEVICES)
def book(session: nox.Session, device: str) -> None:
    """Build the whole book to HTML (book profile), warnings as errors, one execution cache per device."""
    env = _setup(session, device, "book")
    out = f"_build/{device}"
    # The chapters run first, as many at a time as there are cores and one thread each (see
    # kmtbook.execute_chapters: two torch threads per chapter stall whenever another process takes a
    # core); the build then finds them in its execution cache and renders them.
    session.run("python", "-m", "kmtbook.execute_chapters", "--cache", f"{out}/_build/.jupyter_cache", env=env)
    session.run("jupyter-book", "build", ".", "-W", "-n", "--keep-going", "--all", "--path-output", out, env=env)
    index = os.path.join(out, "_build", "html", "index.html")
    if not os.path.isfile(index):
        session.error(f"the build reported success but {index} is missing")
    # each page carries its animations and sliders inline: a reader loads under 1 MB per page
    html = os.path.dirname(index)
    sizes = {os.path.relpath(os.path.join(folder, name), html): os.path.getsize(os.path.join(folder, name))
             for folder, _, names in os.walk(html) for name in names if name.endswith(".html")}
    heavy = {name: size for name, size in sizes.items() if size >= 1_000_000}
    if heavy:
        session.error(f"pages of 1 MB or more (bytes): {heavy}")
    # The whole book as one PDF, from the same execution cache (kmtbook.book_pdf): without Chromium one
    # line says how to get it; under CI that is an error.
    session.run("python", "-m", "kmtbook.book_pdf", "--out", out, env=env)
    session.log(f"book built: {index}")


@nox.session
def train(session: nox.Session) -> None:
    """Train one model: `nox -s train -- --d 32 --k 10 --seed 153476998 --out runs/x` (see kmtlib.training)."""
    env = _setup(session, os.environ.get("KMT_DEVICE", "cpu"), "test")
    session.run("python", "-m", "kmtlib.train", *session.posargs, env=env)


@nox.session
def sweep(session: nox.Session) -> None:
    """The paper's whole set of runs: `nox -s sweep -- --plan` (see kmtbook.paper_sweep; --only, --device,
    --executor). Its extra holds what the command imports: kmtlib, kmtbook's light core and submitit."""
    env = _setup(session, os.environ.get("KMT_DEVICE", "cpu"), "sweep")
    session.run("python", "-m", "kmtbook.paper_sweep", *session.posargs, env=env)


@nox.session
def bench(session: nox.Session) -> None:
    """The benchmarks: `nox -s bench` prints a table and writes results/benchmarks/*.json."""
    env = _setup(session, os.environ.get("KMT_DEVICE", "cpu"), "bench")
    session.run("python", "-m", "benchmarks", *session.posargs, env=env)


LINTED = ["kmtlib", "kmtbook", "tests", "benchmarks", "noxfile.py", "scripts"]


@nox.session
def lint(session: nox.Session) -> None:
    """ruff (the rules in pyproject.toml) over the code, and mypy over kmtlib and kmtbook (its settings
    in pyproject.toml): `nox -s lint`. The lint extra pins both tools."""
    _setup(session, "cpu", "lint")
    session.run("ruff", "check", *LINTED)
    session.run("mypy")


UPGRADE = "_build/upgrade"


@nox.session(reuse_venv=False)
def upgrade(session: nox.Session) -> None:
    """A deliberate upgrade, tried before it lands: `nox -s upgrade` resolves the newest versions pyproject.toml's
    ranges allow into a scratch lock (_build/upgrade/lock/, never requirements/), installs the book's environment
    from it (torch as in every session, TORCH_SPEC), runs every chapter in the quick profile and writes
    _build/upgrade/upgrade_report.{md,json}: each package whose version changes, each guarded number that moves
    beyond its tolerance, each chapter that fails (kmtbook/upgrade_report.py). Fails when a chapter fails;
    `nox -s upgrade -- --strict` also when a number moves. A fresh environment each time (nothing left over)."""
    lock = f"{UPGRADE}/lock"
    session.install("--no-compile", "uv")
    session.run("python", "scripts/lock_requirements.py", "--upgrade-into", lock)
    torch_args = [os.environ.get("TORCH_SPEC", "torch==2.13.0")]
    if os.environ.get("TORCH_INDEX_URL"):
        torch_args += ["--index-url", os.environ["TORCH_INDEX_URL"]]
    session.install("--no-compile", *torch_args)
    session.install("--no-compile", "--require-hashes", "-r", f"{lock}/book.txt")
    session.install("--no-compile", "--no-deps", "-e", ".")
    env = {"KMT_DEVICE": "cpu", "PYTHONDONTWRITEBYTECODE": ""}
    session.run("python", "-c", CHECK_TORCH, "cpu", env=env)
    session.run("python", "-m", "kmtbook.upgrade_report", "--new", lock, "--out", UPGRADE, *session.posargs, env=env)
