"""Every command the book and the READMEs print runs as printed.

The commands are read from the sources, not copied here: the fenced ``bash`` blocks and the inline
code that starts with a command (``papermill ...``, ``python -m kmtlib.train ...``, ``scripts/...``)
of README.md, book/*.md, data/README.md and data/*/README.md, and the rerun box that
kmtbook.sphinx_ext generates for every chapter. Each one runs from the repository root with only
these changes, so that it stays short and writes nothing into the clone:

* a chapter runs in the ``quick`` profile on the test device, into a temporary ``output_dir`` and
  output notebook; an explicit size is set to ``0`` (the profile's value), its name kept;
* a training command runs 3 steps into a temporary ``--out``; the training scripts get a temporary
  ``OUT``, one seed and ``PYTHON`` (this interpreter); the ship scripts temporary ``--runs``/``--out``.

Not run here: commands that install software or start nox sessions (the README's two commands,
which CI runs itself; for nox the session names are checked against noxfile.py), the benchmark
at full size (tests/test_benchmarks.py runs its quick form), the web server for the built book,
and the copy into data/ that records how a shipped file was made.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import jupytext
import papermill as pm
import pytest
from _book_site import exclusive

from kmtbook.parameters import check_passed_parameters
from kmtbook.sphinx_ext.rerun import RERUN_HOW, RERUN_INSTALL, downloaded_notebook_command, rerun_command, rerun_values

ROOT = Path(__file__).resolve().parent.parent
SOURCES = [
    ROOT / "README.md",
    *sorted((ROOT / "book").glob("*.md")),
    ROOT / "data" / "README.md",
    *sorted((ROOT / "data").glob("*/README.md")),
]
PROGRAMS = (
    "papermill ",
    "jupytext ",
    "python -m ",
    "python3 -m ",
    "python scripts/",
    "python3 scripts/",
    "scripts/",
    "nox ",
    "STEPS=",
    "SEEDS=",
    "OUT=",
    "TORCH_SPEC=",
    "cp ",
    "conda ",
)
INLINE = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")
FENCE = re.compile(r"^```(bash|sh|shell|console)\s*\n(.*?)^```", re.S | re.M)
COMMON = {"device", "seed", "profile", "output_dir", "logs_dir", "weights_dir"}


@dataclass(frozen=True)
class Printed:
    where: str
    command: str


def _strip_comment(line: str) -> str:
    quote = None
    for i, ch in enumerate(line):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip()
    return line.rstrip()


def _split(block: str) -> list[str]:
    """Shell lines of a fenced block, comments dropped, continuation lines joined."""
    commands, current = [], ""
    for raw in block.splitlines():
        line = _strip_comment(raw)
        if line.endswith("\\"):
            current += line[:-1].strip() + " "
            continue
        current += line.strip()
        if current.strip():
            commands.append(re.sub(r"\s+", " ", current.strip()))
        current = ""
    return commands


def printed_commands() -> list[Printed]:
    found = []
    for path in SOURCES:
        text = path.read_text()
        where = path.relative_to(ROOT).as_posix()
        for match in FENCE.finditer(text):
            found += [Printed(where, c) for c in _split(match.group(2))]
        prose = FENCE.sub("", re.sub(r"^```\{code-cell\}.*?^```", "", text, flags=re.S | re.M))
        for match in INLINE.finditer(prose):
            code = match.group(1).strip()
            if code.startswith(PROGRAMS) and " " in code:
                found.append(Printed(where, code))
    return found


def rerun_boxes() -> list[Printed]:
    boxes = []
    for path in sorted((ROOT / "book").glob("[0-9]*.md")):
        command = rerun_command(f"book/{path.name}", rerun_values(jupytext.read(path)))
        boxes.append(Printed(f"rerun box of {path.name}", " ".join(_split(command))))
    return boxes


KINDS: list[tuple[str, Callable[[str, list[str]], bool]]] = [
    # (kind, test of the command and its words): the first kind whose test holds
    # the program named in a sentence, not a command line
    ("mention", lambda c, w: c in ("python -m kmtlib.train", "python3 -m kmtlib.train")
     or c.endswith("--help-notebook")),
    ("server", lambda c, w: "-m http.server" in c),  # serves the built book until stopped
    # a pattern the text explains (`SEEDS="..."`, `--out <folder>`)
    ("template", lambda c, w: "..." in c or re.search(r"<\w+>", c) is not None),
    ("install", lambda c, w: w[0] in ("pip", "conda") or "pip install" in c or w[0].endswith("pip")),
    ("nox", lambda c, w: "nox" in w or w[0] == "nox" or "-m nox" in c),
    ("chapter", lambda c, w: "papermill" in w),
    ("train", lambda c, w: "kmtlib.train" in c),
    ("sweep", lambda c, w: "kmtbook.paper_sweep" in c),
    ("script", lambda c, w: re.search(r"scripts/\w+\.(sh|py)", c) is not None),
    ("copy", lambda c, w: w[0] == "cp"),
    ("benchmark", lambda c, w: "-m benchmarks" in c),
]


def kind(command: str) -> str:
    """What a printed command is, which decides how the test runs it."""
    words = command.split()
    return next((name for name, test in KINDS if test(command, words)), "unknown")


def _env() -> dict[str, str]:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHON=sys.executable)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.pop("MPLBACKEND", None)
    return env


def _sh(command: str, cwd: Path = ROOT, timeout: int = 600) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        ["bash", "-o", "pipefail", "-c", command], cwd=cwd, env=_env(), capture_output=True, text=True, timeout=timeout
    )
    assert proc.returncode == 0, (
        f"{command}\nfailed (rc={proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    )
    return proc


def _parameters(command: str) -> list[tuple[str, str]]:
    return re.findall(r"-p (\w+) ('[^']*'|\"[^\"]*\"|\S+)", command)


def for_quick_run(command: str, tmp: Path) -> str:
    """A chapter command made quick: profile, device and output folders replaced, sizes at 0."""
    tmp.mkdir(parents=True, exist_ok=True)
    device = os.environ.get("KMT_DEVICE", "cpu")
    fixed = {"profile": "quick", "device": device, "output_dir": shlex.quote(str(tmp / "results"))}
    kept = []
    for name, value in _parameters(command):
        if name in fixed:
            continue
        if name not in COMMON and re.fullmatch(r"-?[\d.]+(e-?\d+)?", value):
            value = "0"  # a size: the profile's value (the name is still checked by the chapter)
        kept.append(f"-p {name} {value}")
    base = re.sub(r" -p \w+ ('[^']*'|\"[^\"]*\"|\S+)", "", command)
    base = re.sub(
        r"(papermill \S+) (\S+\.ipynb)", lambda m: f"{m.group(1)} {shlex.quote(str(tmp / 'out.ipynb'))}", base
    )
    return " ".join([base, *kept, *(f"-p {k} {v}" for k, v in fixed.items()), "--no-progress-bar"])


def test_the_printed_commands_are_found_and_known():
    commands = printed_commands()
    texts = [p.command for p in commands]
    assert any("papermill book/01_kmeans_and_lloyd.ipynb out.ipynb --cwd book -p seed 3" in t for t in texts), "README"
    assert any(t.startswith("jupytext --to ipynb book/08_training_dynamics.md") for t in texts), "chapter 08"
    assert any(t.startswith("python -m kmtlib.train") for t in texts), "data/README.md's training command"
    unknown = [p for p in commands + rerun_boxes() if kind(p.command) == "unknown"]
    assert not unknown, f"printed commands this test does not know how to run: {unknown}"


def test_every_printed_chapter_command_reads_the_chapter_through_jupytext_with_cwd_book():
    for p in [p for p in printed_commands() + rerun_boxes() if kind(p.command) == "chapter"]:
        source = re.search(r"papermill (\S+)", p.command).group(1)
        # papermill reads an .ipynb (it cannot read MyST Markdown, and from standard input, "-", it warns
        # "the file is not specified with any extension")
        assert source.endswith(".ipynb"), p
        if source.startswith("book/"):
            chapter = source[len("book/"):-len(".ipynb")]
            assert f"jupytext --to ipynb book/{chapter}.md && papermill {source} " in p.command, p
            assert "--cwd book" in p.command, p


def test_a_chapter_is_rerun_as_the_readme_says_with_the_extra_it_names():
    """The rerun box of every page and the README name one install command for a rerun."""
    readme = (ROOT / "README.md").read_text().split("## Rerun one chapter", 1)[1].split("\n## ", 1)[0]
    assert RERUN_INSTALL in readme
    assert RERUN_INSTALL in RERUN_HOW and ".[book,test]" not in RERUN_HOW


def test_printed_nox_sessions_exist():
    sessions = set(re.findall(r"@nox\.session[^\n]*\n(?:@[^\n]*\n)*def (\w+)\(", (ROOT / "noxfile.py").read_text()))
    for p in printed_commands():
        if kind(p.command) == "nox":
            for name in re.findall(r"-s ((?:\"[^\"]+\"|'[^']+'|\S+)(?: (?:\"[^\"]+\"|'[^']+'))*)", p.command):
                for session in shlex.split(name):
                    assert session.split("(")[0] in sessions, f"{p}: no nox session {session}"


def test_the_library_snippet_of_the_readme_runs():
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Use the library", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    proc = subprocess.run(
        [sys.executable, "-c", code + "\nprint(run.mean_log_objective().shape)"],
        cwd=ROOT,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert "torch.Size([21])" in proc.stdout


def test_the_estimator_snippet_of_the_readme_runs():
    """The README's second snippet: TransformerKMeans on iris, in the data's own units."""
    section = (ROOT / "README.md").read_text().split("## Use the library", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert len(blocks) >= 2 and "TransformerKMeans" in blocks[1]
    check = "\nassert km.cluster_centers_.shape == (3, 4) and km.labels_.shape == (150,) and km.inertia_ > 0"
    check += "\nprint('ok')"
    proc = subprocess.run([sys.executable, "-c", blocks[1] + check], cwd=ROOT, env=_env(), capture_output=True,
                          text=True, timeout=300)  # fmt: skip
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stderr


@pytest.mark.notebook
@pytest.mark.xdist_group("book-ipynb")  # both write book/01_kmeans_and_lloyd.ipynb
def test_printed_chapter_commands_run(tmp_path):
    """README, index, reproducibility and chapter 08 commands, one run per distinct quick command."""
    runs = {}
    logs = tmp_path / "dynamics_full"
    for p in printed_commands():
        if kind(p.command) != "chapter":
            continue
        command = p.command.replace("runs/dynamics_full", str(logs))
        runs.setdefault(for_quick_run(command, tmp_path / f"run{len(runs)}"), p)
    # chapter 08 reads the runs its printed training command makes: one short run of the sweep
    _sh(f"STEPS=50 OUT={logs} SEEDS=153476998 NWORKERS=24 WORKER=0 scripts/train_dynamics.sh")
    assert any((logs / d / "manifest.json").is_file() for d in os.listdir(logs))
    notebook_dir = tmp_path / "downloaded"
    notebook_dir.mkdir()
    with exclusive("book-ipynb"):  # the README's command writes book/01_kmeans_and_lloyd.ipynb
        _run_chapter_commands(runs, notebook_dir)


def _run_chapter_commands(runs: dict, notebook_dir: Path) -> None:
    for command, printed in runs.items():
        cwd = ROOT
        source = re.search(r"papermill (\S+)", command).group(1)
        if "/" not in source:  # the executed notebook a reader downloads from the page
            jupytext.write(jupytext.read(ROOT / "book" / (Path(source).stem + ".md")), notebook_dir / source)
            cwd = notebook_dir
        proc = _sh(command, cwd=cwd)
        assert "Passed unknown parameter" not in proc.stderr, printed
        assert "not specified with any extension" not in proc.stderr, printed  # papermill reads a named .ipynb
        out = Path(re.search(r"-p output_dir (\S+)", command).group(1))
        assert json.loads((out / "metrics.json").read_text())["profile"] == "quick", printed


@pytest.mark.notebook
@pytest.mark.xdist_group("book-ipynb")  # both write book/01_kmeans_and_lloyd.ipynb
def test_rerun_boxes_run(tmp_path):
    """Every chapter's box is prepared by papermill with parameters the chapter declares; the first
    chapter's box runs to the end."""
    for i, p in enumerate(rerun_boxes()):
        command = for_quick_run(p.command, tmp_path / f"box{i}")
        stem = re.search(r"book/(\S+)\.md", command).group(1)
        declared = list(pm.inspect_notebook(jupytext.read(ROOT / "book" / f"{stem}.md")))
        check_passed_parameters(declared, [name for name, _ in _parameters(command)])
        with exclusive("book-ipynb"):  # each box writes book/<chapter>.ipynb
            proc = _sh(command if i == 0 else command + " --prepare-only")
        assert "Passed unknown parameter" not in proc.stderr, p
    assert (tmp_path / "box0" / "results" / "metrics.json").is_file()
    assert downloaded_notebook_command("01_kmeans_and_lloyd").startswith("papermill 01_kmeans_and_lloyd.ipynb ")


def test_printed_sweep_commands_plan(tmp_path):
    """`python -m kmtbook.paper_sweep ...` as printed, with --plan (the whole set would train for days) and a
    temporary --out: every option it prints is one the command takes."""
    printed = [p for p in printed_commands() if kind(p.command) == "sweep"]
    assert printed
    for p in printed:
        command = re.sub(r"--out \S+", "", p.command)
        command = re.sub(r"^python3? ", f"{shlex.quote(sys.executable)} ", command)
        proc = _sh(f"{command} --out {tmp_path / 'sweep'}" + ("" if "--plan" in command else " --plan"))
        assert "run(s) in" in proc.stderr, p


def test_printed_training_commands_run(tmp_path):
    """`python -m kmtlib.train` (3 steps), the training scripts (one short run) and the ship scripts."""
    printed = [p for p in printed_commands() if kind(p.command) in ("train", "script")]
    assert printed
    done = set()
    for p in printed:
        command = p.command
        if kind(command) == "train":
            command = re.sub(r"--steps \d+", "--steps 3", command)
            command = re.sub(r"--out \S+", f"--out {tmp_path / 'train' / str(len(done))}", command)
            command = re.sub(r"^python3? ", f"{shlex.quote(sys.executable)} ", command)
        else:
            script = re.search(r"scripts/(\w+)\.(sh|py)", command).group(1)
            runs = tmp_path / "runs" / script.split("_", 1)[1]
            if script == "train_shipped":  # 10 000 steps per run, fixed: the finished run is skipped
                finished = runs / "onehot_seed153476998"
                finished.mkdir(parents=True, exist_ok=True)
                (finished / "manifest.json").write_text("{}")
                command = f"OUT={runs} SEEDS=153476998 EMBEDDINGS=onehot {command}"
            elif script == "train_dynamics":
                command = re.sub(r"(STEPS|OUT)=\S+ ", "", command)
                command = f"STEPS=50 OUT={runs} SEEDS=153476998 NWORKERS=24 WORKER=0 {command}"
            elif script == "train_any_k":  # (three steps of one seed: the script's loop and flags)
                command = re.sub(r"(STEPS|OUT|SEEDS)=\S+ ", "", command)
                command = f"STEPS=3 OUT={runs} SEEDS=153476998 {command}"
            elif script.startswith("ship_"):
                source = tmp_path / "runs" / ("dynamics" if "dynamics" in script else "shipped")
                source.mkdir(parents=True, exist_ok=True)
                command = re.sub(r" --(runs|out) \S+", "", command)
                command += f" --runs {source} --out {tmp_path / 'shipped' / script}"
                command = re.sub(r"^python3? ", f"{shlex.quote(sys.executable)} ", command)
        if command in done:
            continue
        done.add(command)
        _sh(command)
