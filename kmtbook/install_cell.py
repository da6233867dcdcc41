"""The first cell of every chapter's downloadable notebook: it installs the book's version when the notebook runs
outside the book's repository (Colab, a laptop) and does nothing inside it.

The cell is the code of this module below the line ``# The cell's code.``, with the build's constants before it
(:func:`install_cell` writes them: the repository, the version, the CPU torch the book was tested with) and one
call after it. It runs in whatever Python opens the notebook (Colab's kernel, a bare virtual environment), so it
uses the standard library only; its functions are also imported from here, by the build and the tests.

* **Inside the repository** (``kmtlib`` importable from a folder that holds the book, ``data/`` and ``book/``
  beside ``kmtlib/``): nothing to do.
* **Outside**: fetch the repository at the version (a release's tag, or a development build's commit; only that
  commit's files) into ``kmt-book-<version>/`` of the working folder, install it with pip, editable, with the
  chapters' packages (the ``nb`` extra) at the versions of the release's lock
  (``requirements/constraints.txt``), keep an installed torch (Colab ships one; CUDA users bring theirs) and
  install the pinned CPU torch only where there is none, then import from it and work in its ``book/`` folder, as
  the book's build runs a chapter.
* A package the running Python had already imported keeps its installed version where the book accepts it (a
  kernel's own packages, such as Colab's); where the install changed one anyway, the cell says so and asks for a
  restart rather than going on with the old code in memory. After the restart, it finds the copy and goes on.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import nbformat

FIRST_LINE = "# Install kmt-book, this notebook's version, when the notebook runs outside the book's repository."
"""The install cell's first line (:mod:`kmtbook.parameters` tells the cell from a chapter's own cells by it)."""
TAG = "kmt-install"
"""The install cell's tag (in its metadata), by which a notebook's install cell is found and replaced."""
_CELL_CODE = "# The cell's code."


def install_cell(repository: str, ref: str, torch: str, torch_index: str) -> nbformat.NotebookNode:
    """The install cell of ``ref`` (a tag vX.Y.Z or a commit) of ``repository`` (an address or folder git can
    fetch from), with ``torch`` (a pip requirement, e.g. ``torch==2.13.0``) from ``torch_index`` where none is
    installed."""
    for name, value in (("repository", repository), ("ref", ref), ("torch", torch), ("torch_index", torch_index)):
        if not value or any(c in value for c in "\"'\\\n"):
            raise ValueError(f"{name}={value!r}: the install cell needs a plain, non-empty value")
    import nbformat

    header = f'''{FIRST_LINE}
# Inside the repository (kmtlib importable from a copy with its data/ and book/ folders) it does nothing.
# Outside it (Colab, a downloaded notebook), it fetches the repository at REF (only that version's files)
# into kmt-book-<version>/ of the working folder, installs it with pip (the chapters' packages at the versions
# of the release's lock: requirements/constraints.txt), and works in its book/ folder, as the book did.
# A torch already installed is kept (Colab has one; on a CUDA machine install yours first); where there is
# none, TORCH is installed, the CPU build the book was tested with.
# To use another copy of the repository (a fork, or a clone on your disk), set the environment variable
# KMT_BOOK_REPOSITORY to its address or folder before running this cell.
REPOSITORY = "{repository}"  # where the book's code and data are
REF = "{ref}"  # the version: a release's tag, or the commit of a development build
TORCH = "{torch}"
TORCH_INDEX = "{torch_index}"  # where pip finds the CPU build of TORCH
'''
    call = "\ninstall_book(REPOSITORY, REF, TORCH, TORCH_INDEX)\n"
    source = header + "\n" + cell_code() + call
    return nbformat.v4.new_code_cell(source.strip() + "\n", metadata={"tags": [TAG]})


def cell_code() -> str:
    """The functions of the cell: this module's code below the line ``# The cell's code.``"""
    text = Path(__file__).read_text(encoding="utf-8")
    code = text[text.index("\n" + _CELL_CODE + "\n") + len(_CELL_CODE) + 2:]
    return re.sub(r"  # noqa: E402[^\n]*", "", code)  # the linter's notes are about this file, not the cell


def with_install_cell(notebook: nbformat.NotebookNode, cell: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """``notebook`` with ``cell`` as its first cell (in place of an install cell it already has)."""
    kept = [c for c in notebook.cells if TAG not in c.get("metadata", {}).get("tags", [])]
    notebook.cells = [cell, *kept]
    return notebook


def torch_requirement(root: Path) -> tuple[str, str]:
    """``(requirement, index)`` of the CPU torch the launch environment installs (``binder/requirements.txt``:
    its ``torch==`` line and the package index it names); a ValueError when it names none."""
    path = Path(root) / "binder" / "requirements.txt"
    lines = [line.split("#")[0].strip() for line in path.read_text(encoding="utf-8").splitlines()]
    torch = next((line for line in lines if line.startswith("torch==")), None)
    index = next((line.split()[-1] for line in lines if line.startswith(("--extra-index-url", "--index-url"))), None)
    if torch is None or index is None:
        raise ValueError(f"{path} names no pinned torch (a torch== line) and its package index")
    return torch, index


# The cell's code.
import contextlib  # noqa: E402 - the cell's own imports (the code above is not in the cell)
import importlib  # noqa: E402
import importlib.util  # noqa: E402
import os  # noqa: E402
import re  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from importlib import metadata  # noqa: E402
from pathlib import Path  # noqa: E402


def install_book(repository: str, ref: str, torch: str, torch_index: str) -> None:
    """Make kmt-book at ``ref`` importable and work in its book/ folder, unless the book is here already."""
    root = installed_book()
    folder = (Path.cwd() / f"kmt-book-{ref[:12]}").resolve()
    if root is not None and root != folder:
        print(f"kmt-book is installed from {root}: nothing to install.")
        return
    if root is None:  # not installed: fetch and install it
        repository = os.environ.get("KMT_BOOK_REPOSITORY", "").strip() or repository
        loaded = loaded_versions()
        fetch(repository, ref, folder)
        install(folder, torch, torch_index, loaded)
        check_loaded(loaded)
    else:
        print(f"kmt-book {ref} is installed from {folder}.")
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))  # this Python session imports it from there (a new one finds it anyway)
    os.chdir(folder / "book")
    print(f"Ready: the chapter runs in {folder / 'book'}, as in the book's build.")


def installed_book() -> Path | None:
    """The folder the importable kmtlib comes from, if it holds the book (data/ and book/ beside kmtlib/)."""
    importlib.invalidate_caches()
    spec = importlib.util.find_spec("kmtlib")  # finds the package without importing it (nor torch)
    if spec is None or not spec.origin:
        return None
    root = Path(spec.origin).resolve().parent.parent
    return root if (root / "data").is_dir() and (root / "book").is_dir() else None


def fetch(repository: str, ref: str, folder: Path) -> None:
    """Fetch the files of ``ref`` (a tag or a commit) of ``repository`` into ``folder``, without the history."""
    if shutil.which("git") is None:
        raise RuntimeError("git is not installed, and this cell needs it to fetch the book: install git "
                           "(https://git-scm.com/downloads; on Debian or Ubuntu: apt-get install git), then run "
                           "the cell again.")
    if not (folder / ".git").is_dir():
        if folder.exists() and any(folder.iterdir()):
            raise RuntimeError(f"{folder} exists and is not a copy of the book: move it away, or run the "
                               "notebook from another folder.")
        run(["git", "init", "--quiet", str(folder)], "git init")
    print(f"Fetching kmt-book {ref} from {repository} ...", flush=True)
    try:
        run(["git", "-C", str(folder), "fetch", "--quiet", "--depth", "1", repository, ref], "git fetch")
    except RuntimeError as err:
        raise RuntimeError(f"Could not fetch {ref} from {repository}. Check your network, and that the address "
                           f"is right and holds {ref}; to use a fork or a clone on your disk, set "
                           f"KMT_BOOK_REPOSITORY to its address or folder.\n{err}") from None
    run(["git", "-C", str(folder), "checkout", "--quiet", "--force", "FETCH_HEAD"], "git checkout")
    print(f"Fetched into {folder}.", flush=True)


def install(folder: Path, torch: str, torch_index: str, loaded: dict[str, str]) -> None:
    """pip install the book at ``folder`` (editable, with the chapters' packages at the versions of its lock);
    torch only where there is none. The lock does not hold the ``loaded`` packages (imported already)."""
    if importlib.util.find_spec("torch") is None:
        print(f"Installing {torch} (CPU) ...", flush=True)
        pip(["install", torch, "--extra-index-url", torch_index])
    else:
        print(f"Keeping the installed torch {metadata.version('torch')}.", flush=True)
    held = {canonical(name) for name in loaded}
    lock = folder / "requirements" / "constraints.txt"
    lines = [line for line in lock.read_text().splitlines() if canonical(re.split(r"[=<>!~ ;\[]", line)[0]) not in held]
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as constraints:
        constraints.write("\n".join(lines) + "\n")
    print("Installing kmt-book and the packages its chapters use, at the versions of its lock "
          "(a few minutes) ...", flush=True)
    try:
        pip(["install", "--editable", f"{folder}[nb]", "--constraint", constraints.name])
    finally:
        os.unlink(constraints.name)


def loaded_versions() -> dict[str, str]:
    """The installed version of each distribution whose modules this Python session has imported."""
    owners = metadata.packages_distributions()
    versions = {}
    for name in {module.partition(".")[0] for module in list(sys.modules)}:
        for distribution in owners.get(name, []):
            with contextlib.suppress(metadata.PackageNotFoundError):
                versions[distribution] = metadata.version(distribution)
    return versions


def check_loaded(loaded: dict[str, str]) -> None:
    """Stop, asking for a restart, when the install changed a package this Python session had imported."""
    importlib.invalidate_caches()
    changed = []
    for distribution, version in sorted(loaded.items()):
        try:
            now = metadata.version(distribution)
        except metadata.PackageNotFoundError:
            now = "removed"
        if now != version:
            changed.append(f"{distribution} {version} -> {now}")
    if changed:
        raise RuntimeError("The install changed packages that this Python session had already imported ("
                           + ", ".join(changed) + "). Restart it (in Colab: Runtime > Restart session; in "
                           "Jupyter: Kernel > Restart) and run the notebook again from the top: this cell will find "
                           "the book installed and go on.")


def canonical(name: str) -> str:
    """A distribution's name as pip compares it (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower().strip()


def pip(arguments: list[str]) -> None:
    run([sys.executable, "-m", "pip", *arguments, "--quiet", "--disable-pip-version-check"], "pip " + arguments[0])


def run(command: list[str], what: str) -> None:
    """Run ``command``, printing how long it took; a RuntimeError with the end of its output when it fails."""
    start = time.monotonic()
    proc = subprocess.run(command, capture_output=True, text=True)
    if proc.returncode != 0:
        output = (proc.stdout + proc.stderr).strip().splitlines()
        raise RuntimeError(f"{what} failed (exit status {proc.returncode}):\n" + "\n".join(output[-30:]))
    if time.monotonic() - start > 5:
        print(f"  {what}: done in {time.monotonic() - start:.0f} s.", flush=True)
