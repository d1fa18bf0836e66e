"""The console's libraries (Alpine.js's CSP build, Chart.js) are committed under
src/inferd/console/static/vendor/, so that serving needs neither npm nor the network. They are the
files console/build.mjs copied out of the npm packages that console/package-lock.json pins:
vendor/manifest.json records, per package, the lock file's version and tarball integrity and the
sha256 of each file copied. These tests hold the committed files to that record and the record to
the lock file; with the packages installed (`make console` or `npm ci` in console/), the last one
rebuilds the files from them and compares byte for byte."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
CONSOLE = ROOT / "console"
STATIC = ROOT / "src" / "inferd" / "console" / "static"
VENDOR = STATIC / "vendor"


def _json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def _manifest() -> dict[str, Any]:
    packages: dict[str, Any] = _json(VENDOR / "manifest.json")["packages"]
    return packages


def test_the_files_are_those_the_manifest_records() -> None:
    recorded = {name: entry["sha256"] for package in _manifest().values() for name, entry in package["files"].items()}
    assert recorded, "the manifest lists no file"
    for name, digest in recorded.items():
        assert hashlib.sha256((VENDOR / name).read_bytes()).hexdigest() == digest, name
    # Nothing else lies there: the copies, their licences and the manifest.
    assert sorted(p.name for p in VENDOR.iterdir()) == sorted([*recorded, "LICENSES.txt", "manifest.json"])


def test_the_manifest_matches_the_lock_file() -> None:
    lock = _json(CONSOLE / "package-lock.json")["packages"]
    wanted = _json(CONSOLE / "package.json")["dependencies"]
    manifest = _manifest()
    assert sorted(manifest) == sorted(wanted)
    for name, package in manifest.items():
        locked = lock[f"node_modules/{name}"]
        assert package["version"] == locked["version"] == wanted[name], name
        assert package["integrity"] == locked["integrity"], name
        assert re.fullmatch(r"sha512-[A-Za-z0-9+/]{86}==", package["integrity"]), name
        assert f"{name} {package['version']} ({package['license']})" in (VENDOR / "LICENSES.txt").read_text()


def test_alpine_is_its_csp_build() -> None:
    # The console's CSP has no 'unsafe-eval': the standard build would fail on its first attribute.
    assert "@alpinejs/csp" in _manifest() and "alpinejs" not in _manifest()


def test_the_page_loads_each_vendored_script() -> None:
    page = (STATIC / "index.html").read_text(encoding="utf-8")
    loaded = set(re.findall(r'src="/console/vendor/([^"]+)"', page))
    scripts = {name for package in _manifest().values() for name in package["files"] if name.endswith(".js")}
    assert loaded == scripts


@pytest.mark.skipif(not (CONSOLE / "node_modules" / ".package-lock.json").is_file() or shutil.which("node") is None,
                    reason="the npm packages are not installed (`make console` installs them with npm ci)")
def test_a_rebuild_from_the_installed_packages_gives_the_same_files(tmp_path: Path) -> None:
    installed = _json(CONSOLE / "node_modules" / ".package-lock.json")["packages"]
    for name, package in _manifest().items():
        if installed.get(f"node_modules/{name}", {}).get("version") != package["version"]:
            pytest.skip(f"console/node_modules holds another {name} than the lock file: run `make console`")
    subprocess.run(["node", str(CONSOLE / "build.mjs"), "--out", str(tmp_path)], check=True, capture_output=True)
    built = sorted(p.name for p in tmp_path.iterdir())
    assert built == sorted(p.name for p in VENDOR.iterdir())
    for name in built:
        assert (tmp_path / name).read_bytes() == (VENDOR / name).read_bytes(), name
