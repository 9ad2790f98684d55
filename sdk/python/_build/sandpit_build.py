"""A PEP 517 build backend for the sandpit package, in the standard library only.

The package is pure Python with no dependencies, so building its wheel is
zipping src/sandpit with the metadata files the wheel format names. A backend
of its own, rather than setuptools, means `pip install ./sdk/python` needs
nothing from a package index and no `wheel` package: it works offline with
any python3 >= 3.9 and the pip its venv comes with. The metadata is read from
pyproject.toml (tomllib where Python has it, else the few keys this file
uses, parsed by hand), so there is one place to change it.
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import re
import tarfile
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = "sandpit"


def _project() -> dict:
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        data = f.read()
    try:
        import tomllib  # Python 3.11+

        return tomllib.loads(data.decode())["project"]
    except ImportError:
        pass
    # Before 3.11: the [project] table's plain string keys are all this
    # backend reads.
    project, section = {}, None
    for line in data.decode().splitlines():
        line = line.strip()
        if line.startswith("["):
            section = line.strip("[]").strip()
            continue
        m = re.match(r'^([A-Za-z-]+)\s*=\s*"([^"]*)"\s*$', line)
        if section == "project" and m:
            project[m.group(1)] = m.group(2)
    return project


def _metadata() -> str:
    p = _project()
    lines = [
        "Metadata-Version: 2.1",
        f"Name: {p['name']}",
        f"Version: {p['version']}",
        f"Summary: {p.get('description', '')}",
        f"Requires-Python: {p.get('requires-python', '>=3.9')}",
        "Description-Content-Type: text/markdown",
        "",
    ]
    readme = os.path.join(ROOT, p.get("readme", "README.md"))
    body = open(readme, encoding="utf-8").read() if os.path.exists(readme) else ""
    return "\n".join(lines) + "\n" + body


def _dist_info() -> str:
    p = _project()
    return f"{p['name']}-{p['version']}.dist-info"


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def _files() -> list[tuple[str, bytes]]:
    src = os.path.join(ROOT, "src")
    out = []
    for dirpath, dirnames, filenames in os.walk(os.path.join(src, PACKAGE)):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for name in sorted(filenames):
            if name.endswith((".pyc", ".pyo")):
                continue
            path = os.path.join(dirpath, name)
            with open(path, "rb") as f:
                out.append((os.path.relpath(path, src).replace(os.sep, "/"), f.read()))
    return out


def _wheel_name() -> str:
    p = _project()
    return f"{p['name']}-{p['version']}-py3-none-any.whl"


def _write_wheel(directory: str, files: list[tuple[str, bytes]]) -> str:
    info = _dist_info()
    meta = [
        (f"{info}/METADATA", _metadata().encode()),
        (f"{info}/WHEEL", b"Wheel-Version: 1.0\nGenerator: sandpit_build\nRoot-Is-Purelib: true\nTag: py3-none-any\n"),
    ]
    records = [_record_line(n, d) for n, d in files + meta] + [f"{info}/RECORD,,"]
    name = _wheel_name()
    with zipfile.ZipFile(os.path.join(directory, name), "w", zipfile.ZIP_DEFLATED) as z:
        for n, d in files + meta:
            z.writestr(n, d)
        z.writestr(f"{info}/RECORD", "\n".join(records) + "\n")
    return name


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    info = os.path.join(metadata_directory, _dist_info())
    os.makedirs(info, exist_ok=True)
    with open(os.path.join(info, "METADATA"), "w", encoding="utf-8") as f:
        f.write(_metadata())
    return _dist_info()


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    return _write_wheel(wheel_directory, _files())


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    # A .pth file that puts src/ on sys.path: edits are seen without a rebuild.
    return _write_wheel(wheel_directory, [(f"_{PACKAGE}_editable.pth", (os.path.join(ROOT, "src") + "\n").encode())])


def build_sdist(sdist_directory, config_settings=None):
    p = _project()
    base = f"{p['name']}-{p['version']}"
    name = base + ".tar.gz"
    with tarfile.open(os.path.join(sdist_directory, name), "w:gz") as t:
        for rel in ["pyproject.toml", "README.md", "_build/sandpit_build.py"]:
            t.add(os.path.join(ROOT, rel), arcname=f"{base}/{rel}")
        for n, d in _files():
            info = tarfile.TarInfo(f"{base}/src/{n}")
            info.size = len(d)
            t.addfile(info, io.BytesIO(d))
        pkg = _metadata().encode()
        info = tarfile.TarInfo(f"{base}/PKG-INFO")
        info.size = len(pkg)
        t.addfile(info, io.BytesIO(pkg))
    return name
