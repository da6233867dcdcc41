"""How the built book is cited: its version, the commit it was built from and its address.

Every citation the book prints (the BibTeX of the "How to cite" page, the line under each figure,
the line at the end of each page, the ``CITATION.cff`` published beside the HTML) comes from one
:class:`BookCitation`, read at build time by :func:`read_citation`:

* **title and authors** from the repository's ``CITATION.cff``;
* **version** from ``kmtlib.__version__`` (the package the chapters ran with);
* **commit** from ``git rev-parse HEAD`` in the repository, and whether tracked files had
  uncommitted changes; outside a git checkout there is no commit, and the citations say so;
* **year** from the commit's date (the build's date outside a git checkout);
* **address** of the published site from Sphinx's ``html_baseurl`` (``html.baseurl`` in
  ``_config.yml``), which the environment variable ``KMT_BOOK_URL`` replaces at publish time (the
  workflow in ``.github/workflows/book.yml`` sets it to the address GitHub Pages gives). The site
  holds every version in a folder of its own (:mod:`kmtbook.publish`), so a citation names the
  **versioned address** ``<site>/vX.Y.Z/`` of a release, or ``<site>/dev/`` (with the commit) of the
  main branch: the folder is ``KMT_BOOK_VERSION`` (the workflow sets it from the tag), ``dev`` when
  unset. Without an address, citations name pages and files by their path in the book, never by an
  invented address;
* **DOI** of the release from the environment variable ``KMT_BOOK_DOI`` (``10.NNNN/...``, a
  ``https://doi.org/`` address or ``doi:`` prefix is accepted): Zenodo mints a DOI for each GitHub
  release (``.zenodo.json`` holds the record's metadata), so a release built again with its DOI set
  names it in every citation (the BibTeX's ``doi`` field, the line under each figure and at the end of
  each page, the figure files and the build's ``CITATION.cff``). Unset: no DOI, none invented;
* **repository** (the address of the source code, where the commit can be looked up) from the
  environment variable ``KMT_REPOSITORY_URL`` (the publishing workflow sets it to
  ``${{ github.server_url }}/${{ github.repository }}``), else from GitHub Actions' own variables
  (``GITHUB_SERVER_URL``, ``GITHUB_REPOSITORY``) when the book is built there, else none: a local
  build names no repository rather than a guessed one.
"""

from __future__ import annotations

import datetime
import re
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from .arguments import check_flag

BOOK_URL_VARIABLE = "KMT_BOOK_URL"
"""The environment variable that sets the book's address at publish time (over ``html_baseurl``)."""

REPOSITORY_URL_VARIABLE = "KMT_REPOSITORY_URL"
"""The environment variable that names the repository the book was built from (its web address)."""

BOOK_VERSION_VARIABLE = "KMT_BOOK_VERSION"
"""The environment variable that names this build's folder of the site: ``vX.Y.Z`` (a release) or ``dev``."""

DOI_VARIABLE = "KMT_BOOK_DOI"
"""The environment variable that gives the DOI of the release being built (Zenodo's DOI of this version)."""

DOI_RESOLVER = "https://doi.org/"
_DOI = re.compile(r"10\.\d{4,9}(?:\.\d+)*/[A-Za-z0-9:/_;\-.()\[\]]+")
"""A DOI as Zenodo's deposit metadata accepts it (its ``doi`` field's pattern)."""

LICENCE_TEXT = "CC BY 4.0"
LICENCE_TEXT_URL = "https://creativecommons.org/licenses/by/4.0/"
LICENCE_CODE = "MIT"
LICENCE_STATEMENT = (f"Text and figures: Creative Commons Attribution 4.0 International ({LICENCE_TEXT}, "
                     f"{LICENCE_TEXT_URL}), file LICENSE-CC-BY-4.0; code: {LICENCE_CODE} licence, file LICENSE")
"""Which licence applies to what: the words every citation, figure file and CITATION.cff carry."""


@dataclass(frozen=True)
class BookCitation:
    """What a citation of this build of the book says."""

    title: str
    authors: str
    version: str
    year: str
    commit: str | None = None  # the full hash, or None outside a git checkout
    modified: bool = False  # tracked files differed from the commit when the book was built
    url: str | None = None  # this version's address (<site>/vX.Y.Z/ or <site>/dev/), or None when not published
    repository: str | None = None  # the repository's address, when known
    site: str | None = None  # the address of the site that holds every version, ending in "/"
    slot: str | None = None  # this version's folder of the site: "vX.Y.Z" or "dev"
    doi: str | None = None  # the release's DOI (10.NNNN/...), when the build was given one (KMT_BOOK_DOI)

    @property
    def key(self) -> str:
        """The BibTeX key of the book."""
        return f"kmtbook{self.year}"

    @property
    def short_commit(self) -> str | None:
        return self.commit[:12] if self.commit else None

    @property
    def doi_url(self) -> str | None:
        """The DOI as an address (``https://doi.org/10.NNNN/...``), when the build has one."""
        return DOI_RESOLVER + self.doi if self.doi else None

    def build_text(self, full: bool = False, doi: bool = True) -> str:
        """``version 0.1.0, commit 6ec360e0a137`` (the full hash with ``full``), noting local changes, and the
        release's DOI (``, https://doi.org/...``) when the build has one (unless ``doi`` is false)."""
        commit = self.commit if check_flag("full", full) else self.short_commit
        named = f", {self.doi_url}" if check_flag("doi", doi) and self.doi_url else ""
        if commit is None:
            return f"version {self.version} (no commit recorded: built outside a git checkout){named}"
        changes = " with uncommitted changes" if self.modified else ""
        return f"version {self.version}, commit {commit}{changes}{named}"

    def source_text(self) -> str:
        """``; source code https://host/owner/repo`` when the repository is known, else nothing."""
        return f"; source code {self.repository}" if self.repository else ""

    @property
    def commit_url(self) -> str | None:
        """Where the commit is looked up: ``<repository>/tree/<commit>`` (GitHub's form), when both are known."""
        return f"{self.repository}/tree/{self.commit}" if self.repository and self.commit else None

    def address(self, path: str) -> str | None:
        """The published address of ``path`` (relative to the root of the HTML), if the book has one."""
        return self.url + path.lstrip("/") if self.url else None

    def where(self, path: str) -> str:
        """The address of ``path``, or without one its path in the book's HTML."""
        return self.address(path) or f"{path} in the book's HTML"

    def reference(self, locator: str, path: str) -> str:
        """A one-line reference to a part of the book: ``locator`` (e.g. "Chapter 5, Fig. 5.5") at ``path``."""
        return (f"{self.authors} ({self.year}). {self.title}, {self.build_text()}{self.source_text()}. {locator}. "
                f"{self.where(path)}.")

    def bibtex(self) -> str:
        """The BibTeX entry of the book."""
        fields = [
            ("title", _protected(_bibtex_title(self.title))),
            ("author", "{" + self.authors + "}"),  # a group, not a person's name
            ("year", self.year),
            ("version", self.version),
            *([("doi", self.doi)] if self.doi else []),
            ("note", self.note()),
        ]
        if self.url:
            fields += [("howpublished", "\\url{" + self.url + "}"), ("url", self.url)]
        return _bibtex_entry("misc", self.key, fields)

    def note(self) -> str:
        """The BibTeX note: version and full commit, and the source code's address when known."""
        source = f"; source code \\url{{{self.repository}}}" if self.repository else ""
        licence = f"; licence {LICENCE_TEXT} (text, figures), MIT (code)"
        return _capital(self.build_text(full=True, doi=False)) + source + licence  # the DOI has a field of its own

    def figure_bibtex(self, label: str, number: str, chapter: str, caption_title: str, files: str) -> str:
        """A BibTeX entry for one figure, for a bibliography that lists figures separately."""
        where = self.address(files) or files
        fields = [
            ("title", _protected(f"{caption_title} ({number}, {label})")),
            ("author", "{" + self.authors + "}"),  # a group, not a person's name
            ("year", self.year),
            ("howpublished", f"{_protected(_bibtex_title(self.title))}, {chapter}"),
            *([("doi", self.doi)] if self.doi else []),
            ("note", self.note() + "; file " + (f"\\url{{{where}}}" if self.url else where)),
        ]
        return _bibtex_entry("misc", f"{self.key}{re.sub(r'[^a-z0-9]', '', label)}", fields)

    def cff(self, base: Mapping[str, Any]) -> dict[str, Any]:
        """The repository's CITATION.cff (``base``) completed with what this build knows."""
        data = dict(base)
        data["version"] = self.version
        if self.commit:
            data["commit"] = self.commit
        if self.doi:
            data["doi"] = self.doi
        if self.url:
            data["url"] = self.url
        if self.repository:
            data["repository-code"] = self.repository
        return data


def _protected(title: str) -> str:
    """A title in braces: BibTeX styles that lower-case titles (``plain``, ``abbrv``) keep its capitals."""
    return "{" + title + "}"


def _capital(text: str) -> str:
    return text[:1].upper() + text[1:]


def _bibtex_title(title: str) -> str:
    """A title for BibTeX: 'quoted' parts in TeX quotes, the book's name kept as written."""
    title = re.sub(r"['\"]([^'\"]+)['\"]", r"``\1''", title)
    return title.replace("kmt-book", "{kmt-book}", 1)


def _bibtex_entry(kind: str, key: str, fields: list[tuple[str, str]]) -> str:
    width = max(len(name) for name, _ in fields)
    body = ",\n".join(f"  {name.ljust(width)} = {{{value}}}" for name, value in fields)
    return f"@{kind}{{{key},\n{body}\n}}"


def _git(root: Path, *args: str) -> str | None:
    try:
        proc = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return proc.stdout.strip() if proc.returncode == 0 else None


def _authors(cff: Mapping[str, Any]) -> str:
    names = []
    for person in cff.get("authors") or []:
        if "name" in person:
            names.append(str(person["name"]))
        else:
            names.append(" ".join(str(person[k]) for k in ("given-names", "family-names") if person.get(k)))
    return " and ".join(names) or "kmt-book contributors"


def read_cff(root: Path) -> dict[str, Any]:
    """The repository's CITATION.cff as a mapping (empty if there is none)."""
    path = root / "CITATION.cff"
    if not path.is_file():
        return {}
    return yaml.safe_load(path.read_text(encoding="utf-8")) or {}


def read_citation(root: Path, version: str, url: str | None, environ: Mapping[str, str]) -> BookCitation:
    """The citation of the book built from the repository at ``root`` with ``kmtlib`` ``version``,
    published at ``url`` (``html_baseurl``; ``KMT_BOOK_URL`` in ``environ`` takes its place)."""
    cff = read_cff(root)
    commit = _git(root, "rev-parse", "--verify", "HEAD")
    modified = bool(_git(root, "status", "--porcelain", "--untracked-files=no")) if commit else False
    date = _git(root, "show", "-s", "--format=%cs", "HEAD") if commit else None
    year = (date or datetime.date.today().isoformat())[:4]
    site = site_address(url, environ)
    slot = version_slot(version, environ) if site else None
    address = f"{site}{slot}/" if site else None
    repository = environ.get(REPOSITORY_URL_VARIABLE, "").strip().rstrip("/") or None
    if repository is None and environ.get("GITHUB_SERVER_URL") and environ.get("GITHUB_REPOSITORY"):
        repository = f"{environ['GITHUB_SERVER_URL'].rstrip('/')}/{environ['GITHUB_REPOSITORY']}"
    return BookCitation(title=str(cff.get("title") or "kmt-book"), authors=_authors(cff), version=version,
                        year=year, commit=commit or None, modified=modified, url=address, repository=repository,
                        site=site, slot=slot, doi=book_doi(environ))


def book_doi(environ: Mapping[str, str]) -> str | None:
    """The release's DOI from ``KMT_BOOK_DOI`` in ``environ`` (``10.NNNN/...``; a ``https://doi.org/``
    address or a ``doi:`` prefix is taken off), None when unset; a ValueError naming the setting when it is no DOI."""
    given = environ.get(DOI_VARIABLE, "").strip()
    if not given:
        return None
    doi = re.sub(r"^(?:https?://(?:dx\.)?doi\.org/|doi:\s*)", "", given, flags=re.I)
    if not _DOI.fullmatch(doi):
        raise ValueError(f"{DOI_VARIABLE}={given!r} is not a DOI: give the release's DOI as Zenodo shows it, "
                         "e.g. 10.5281/zenodo.1234567 (or unset it)")
    return doi


def site_address(url: str | None, environ: Mapping[str, str]) -> str | None:
    """The site's address (ending in "/"): ``KMT_BOOK_URL`` in ``environ``, else ``url``, else None."""
    address = (environ.get(BOOK_URL_VARIABLE) or url or "").strip() or None
    if address and not address.endswith("/"):
        address += "/"
    return address


def version_slot(version: str, environ: Mapping[str, str]) -> str:
    """This build's folder of the site: ``KMT_BOOK_VERSION`` (``dev`` when unset). A release folder must
    name the package ``version`` (``v`` + version): a citation never puts one version under another's name."""
    from .publish import DEV, PublishError, check_version

    slot = environ.get(BOOK_VERSION_VARIABLE, "").strip() or DEV
    try:
        check_version(slot)
    except PublishError as err:
        raise ValueError(f"{BOOK_VERSION_VARIABLE}={slot!r}: {err}") from None
    if slot != DEV and slot != f"v{version}":
        raise ValueError(f"{BOOK_VERSION_VARIABLE}={slot!r} but the package version is {version!r}: a release "
                         f"is published as v{version}")
    return slot
