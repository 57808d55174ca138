"""Write third_party/verl/ from a git clone of verl at a commit: what the offline check reads.

    python -m tools.vendor_verl --repo <a clone of github.com/verl-project/verl> --ref <commit>

It writes, for that commit:
- config/: verl/trainer/config/ as it is (the YAML tree main_ppo composes with Hydra);
- imports.json: for each module of the `verl` package, the imports it runs for certain at
  import time and in each of its functions (tools/verl_imports.py), and whether it is a package;
- requirements.txt: verl's own, as its CI installs it on top of the image;
- reward_data_sources.json: the `data_source` values verl's default reward scores
  (verl/utils/reward_score/__init__.py `default_compute_score`, read with `ast`): a dataset
  whose rows name another needs a reward function of its own (components/runspec/run_experiment.py).
The Python source itself is not kept (2 MB for the modules a run reaches): the index is what the
check walks, and this command rebuilds it from the commit.
"""

from __future__ import annotations

import argparse
import ast
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
REWARD_DATA_SOURCES = VENDOR / "reward_data_sources.json"
_CONFIG_PREFIX = "verl/trainer/config/"
_REWARD_SCORE = "verl/utils/reward_score/__init__.py"
_DEFAULT_SCORE = "default_compute_score"


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


def reward_data_sources(text: str, path: str = _REWARD_SCORE) -> dict:
    """The `data_source` values `default_compute_score` has a reward for, each with its line:
    `data_source == "x"`, `data_source in [...]` and `data_source.startswith("x")` in its tests.
    Its last branch raises NotImplementedError for every other value."""
    function = next(node for node in ast.walk(ast.parse(text))
                    if isinstance(node, ast.FunctionDef) and node.name == _DEFAULT_SCORE)
    exact: dict[str, int] = {}
    prefixes: dict[str, int] = {}

    def constants(node: ast.AST) -> list[str]:
        items = node.elts if isinstance(node, (ast.List, ast.Tuple, ast.Set)) else [node]
        return [item.value for item in items
                if isinstance(item, ast.Constant) and isinstance(item.value, str)]

    for node in ast.walk(function):
        if (isinstance(node, ast.Compare) and isinstance(node.left, ast.Name)
                and node.left.id == "data_source" and len(node.ops) == 1
                and isinstance(node.ops[0], (ast.Eq, ast.In))):
            for value in constants(node.comparators[0]):
                exact.setdefault(value, node.lineno)
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr == "startswith" and isinstance(node.func.value, ast.Name)
              and node.func.value.id == "data_source"):
            for value in constants(node.args[0]):
                prefixes.setdefault(value, node.lineno)
    if not exact:
        raise SystemExit(f"{path}: {_DEFAULT_SCORE} names no data_source; read it again")
    return {"source": f"{path} {_DEFAULT_SCORE}", "exact": exact, "prefixes": prefixes}


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
    sources = {"ref": commit, **reward_data_sources(files[_REWARD_SCORE])}
    REWARD_DATA_SOURCES.write_text(json.dumps(sources, indent=1, sort_keys=True) + "\n")
    print(f"third_party/verl: verl {commit[:12]}, {len(index(files))} modules indexed")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
