"""kmtlib.training.provenance: the fingerprint a run's manifest records covers every file of the
package (the kernels in their subfolder, the pretrained layer), not the top-level sources only."""

from __future__ import annotations

import shutil
from pathlib import Path

import kmtlib
from kmtlib.training.provenance import package_files, py_only_sha256, source_fingerprint, source_sha256

PACKAGE = Path(kmtlib.__file__).resolve().parent


def _copy(tmp_path: Path) -> Path:
    copy = tmp_path / "kmtlib"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return copy


def test_editing_a_kernel_or_the_pretrained_layer_changes_the_fingerprint(tmp_path):
    copy = _copy(tmp_path)
    before = source_fingerprint(copy)
    assert before["kmtlib_source_sha256"] == source_sha256(PACKAGE)  # (the copy is the package)
    assert before["git_commit"] is None  # (no checkout around the copy)
    kernel = copy / "kernels" / "limit_model.py"
    kernel.write_text(kernel.read_text() + "\n# an edit\n")
    after_kernel = source_sha256(copy)
    assert after_kernel != before["kmtlib_source_sha256"]
    assert py_only_sha256(copy) == py_only_sha256(PACKAGE)  # (what the old fingerprint could not see)
    pretrained = next(p for p in (copy / "pretrained").iterdir() if p.suffix == ".pt")
    data = bytearray(pretrained.read_bytes())
    data[-1] ^= 0x01
    pretrained.write_bytes(bytes(data))
    assert source_sha256(copy) not in (after_kernel, before["kmtlib_source_sha256"])


def test_the_fingerprint_skips_caches_and_names_its_scheme(tmp_path):
    copy = _copy(tmp_path)
    before = source_sha256(copy)
    (copy / "kernels" / "__pycache__").mkdir(exist_ok=True)
    (copy / "kernels" / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"cache")
    (copy / "stray.pyc").write_bytes(b"cache")
    assert source_sha256(copy) == before
    files = package_files(copy)
    assert files == sorted(files) and "kernels/limit_model.py" in files and "__init__.py" in files
    (copy / "kernels" / "limit_model.py").rename(copy / "kernels" / "limit_model2.py")  # (a path counts too)
    assert source_sha256(copy) != before
    assert source_fingerprint(copy)["kmtlib_source_sha256_scheme"] == "every file under kmtlib/, recursive"
