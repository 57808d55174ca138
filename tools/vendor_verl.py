"""Write third_party/verl/ from a git clone of verl at a commit: what the offline check reads.

    python -m tools.vendor_verl --repo <a clone of github.com/verl-project/verl> --ref <commit>

It writes, for that commit:
- config/: verl/trainer/config/ as it is (the YAML tree main_ppo composes with Hydra);
- imports.json: for each module of the `verl` package, the imports it runs for certain at
  import time and in each of its functions (tools/verl_imports.py), and whether it is a package;
- requirements.txt: verl's own, as its CI installs it on top of the image.
The Python source itself is not kept (2 MB for the modules a run reaches): the index is what the
check walks, and this command rebuilds it from the commit.
"""

from __future__ import annotations

import argparse
import io
import json
import shutil
import subprocess
import tarfile
from pathlib import Path

from tools import verl_imports

ROOT = Path(__file__).resolve().parent.parent
VENDOR = ROOT / "third_party" / "verl"
CONFIG = VENDOR / "config"
INDEX = VENDOR / "imports.json"
REQUIREMENTS = VENDOR / "requirements.txt"
_CONFIG_PREFIX = "verl/trainer/config/"


def index(files: dict[str, str]) -> dict[str, dict]:
    """{module: {"package", "at_import", "functions"}} for every `verl/**.py` in `files`."""
    modules = {}
    for path, text in sorted(files.items()):
        if not (path.startswith("verl/") and path.endswith(".py")):
            continue
        is_package = path.endswith("/__init__.py")
        name = path[: -len("/__init__.py") if is_package else -len(".py")].replace("/", ".")
        found = verl_imports.read(text, name, is_package)
        modules[name] = {
            "package": is_package,
            "at_import": [list(item) for item in found.at_import],
            "functions": {key: [list(item) for item in value]
                          for key, value in sorted(found.functions.items())},
        }
    return modules


def _archive(repo: str, ref: str) -> dict[str, str]:
    """The text of verl/, requirements.txt at `ref`, read from `git archive`."""
    raw = subprocess.run(["git", "-C", repo, "archive", ref, "verl", "requirements.txt"],
                         check=True, capture_output=True).stdout
    files = {}
    with tarfile.open(fileobj=io.BytesIO(raw)) as tar:
        for member in tar.getmembers():
            if member.isfile():
                files[member.name] = tar.extractfile(member).read().decode()
    return files


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo", required=True, help="a git clone of verl")
    parser.add_argument("--ref", required=True, help="the commit, in full")
    args = parser.parse_args(argv)
    commit = subprocess.run(["git", "-C", args.repo, "rev-parse", f"{args.ref}^{{commit}}"],
                            check=True, capture_output=True, text=True).stdout.strip()
    files = _archive(args.repo, commit)
    shutil.rmtree(CONFIG, ignore_errors=True)
    for path, text in files.items():
        if path.startswith(_CONFIG_PREFIX) and path.endswith(".yaml"):
            target = CONFIG / path[len(_CONFIG_PREFIX):]
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
    INDEX.write_text(json.dumps({"ref": commit, "modules": index(files)}, indent=0,
                                sort_keys=True) + "\n")
    REQUIREMENTS.write_text(files["requirements.txt"])
    print(f"third_party/verl: verl {commit[:12]}, {len(index(files))} modules indexed")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
