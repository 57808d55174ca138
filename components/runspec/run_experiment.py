"""Your own experiment, checked the way verl would check it hours later (issue 41 section 1).

What a run brings (run_inputs.py) is checked here against what verl does with it at the pinned
ref (components/facts/verl.py), before anything is created and with no cloud:
- every relative path (`trainFiles`, `valFiles`, `rewardFunctionPath`) is a file that the local
  working directory uploads; a near miss gets "did you mean";
- the reward file parses and defines the named function with the keywords verl calls it with
  (read with `ast`: the user's code is never imported here);
- a data file has a suffix verl reads; a parquet file is parquet and has the columns verl's RL
  dataset reads, from its schema alone (pyarrow's `read_schema`, no rows);
- without `rewardFunctionPath`, every row's `data_source` has a reward built into verl at the
  pin (the list tools/vendor_verl.py reads from verl's source into third_party/verl/): only the
  one column is read;
- an absolute path off the bucket's mount must be in the image: a warning (`image_warnings`).

What it does not do: read the bucket. A `gs://` working directory or file, and a `/data/...`
one of the user's own, are checked at preview where the bucket can be read
(components/preflight/bucket.py `brought_problems`), with `reward_source_problems` from here.
A JSON data file is checked for its existence only.
"""

from __future__ import annotations

import ast
import difflib
import json
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Callable

from pydantic.alias_generators import to_camel

from components.facts import verl
from components.facts.layout import DATA_MOUNT
from components.messages import quoted
from components.runspec.run_config import CONFIG_KEY
from components.runspec.run_inputs import PATH_FIELDS, is_gs, local_files, working_dir_problems

if TYPE_CHECKING:
    from components.runspec.run_config import GrpoRunConfig

ROOT = Path(__file__).resolve().parents[2]
DATA_FIELDS = ("train_files", "val_files")
# The run's files a user brings, checked where they are: data and the reward. (The model is a
# directory that staging writes or the user copies, checked by the model check.)
FILE_FIELDS = (*DATA_FIELDS, "reward_function_path")
# How many distinct data_source values a message names before it says "and N more".
SHOWN = 5

KeyOf = Callable[[str], str]


def job_key(field: str) -> str:
    """The config key of a field of the run, as the user sets it: `<project>:job.trainFiles`."""
    return f"{CONFIG_KEY}.{to_camel(field)}"


def reward_data_sources() -> tuple[frozenset[str], tuple[str, ...]]:
    """The data_source values verl's default reward scores at the pin, and the prefixes it
    scores (third_party/verl/reward_data_sources.json, read from verl's source)."""
    known = json.loads((ROOT / verl.REWARD_DATA_SOURCES_FILE).read_text())
    return frozenset(known["exact"]), tuple(known["prefixes"])


def has_builtin_reward(data_source: str) -> bool:
    exact, prefixes = reward_data_sources()
    return data_source in exact or data_source.startswith(prefixes)


def overridden(run: GrpoRunConfig, key: str) -> tuple[bool, object]:
    """Whether `extraOverrides` sets `key` (or a key under it), and its value if set exactly."""
    for written, value in run.extra_overrides.items():
        bare = written.lstrip("+~")
        if bare == key:
            return True, value
        if bare.startswith(key + "."):
            return True, None
    return False, None


def experiment_problems(run: GrpoRunConfig, bucket: str, key_of: KeyOf) -> list[str]:
    """Every reason verl would fail on the files a local working directory brings; [] if none,
    and [] without a local working directory or with one that is itself refused
    (run_inputs.working_dir_problems). `run` is as configured: its relative paths not placed."""
    if run.working_dir is None or is_gs(run.working_dir) or working_dir_problems(
            key_of("working_dir"), run.working_dir, bucket):
        return []
    workdir = Path(run.working_dir).expanduser()
    uploaded = [name for name, _ in local_files(workdir)]
    problems: list[str] = []
    found: dict[str, Path] = {}
    for field in FILE_FIELDS:
        value = getattr(run, field)
        if value is None or is_gs(value) or value.startswith("/"):
            continue
        name = PurePosixPath(value).as_posix()
        if name not in uploaded:
            problems.append(missing_problem(
                key_of(field), value, uploaded,
                f"in {key_of('working_dir')}={quoted(run.working_dir)}, which is what the pods "
                "read relative paths in",
            ))
            continue
        found[field] = workdir / name
    for field in DATA_FIELDS:
        if field in found:
            problems += data_file_problems(key_of(field), getattr(run, field), found[field], run,
                                           key_of)
    if "reward_function_path" in found:
        problems += reward_source_problems(
            run, key_of, found["reward_function_path"].read_bytes(), str(found["reward_function_path"]))
    return problems


def missing_problem(key: str, value: str, names: list[str], where: str) -> str:
    """`value` is not among `names` (the files that are there): with the nearest one, if any."""
    close = difflib.get_close_matches(PurePosixPath(value).as_posix(), names, n=1, cutoff=0.6)
    hint = f" Did you mean {quoted(close[0])}?" if close else ""
    return (
        f"{key}={quoted(value)} is not a file {where}.{hint} Fix the name, or add the file"
    )


# --- The reward file --------------------------------------------------------------------------

def reward_source_problems(run: GrpoRunConfig, key_of: KeyOf, source: bytes, shown: str) -> list[str]:
    """What verl would fail on loading and calling the reward in `source` (the file at
    `rewardFunctionPath`, shown as `shown`): it does not parse, it does not define the named
    function, or the function cannot take verl's keywords. Read with ast only."""
    path_key = f"{key_of('reward_function_path')}={quoted(run.reward_function_path)}"
    name = run.reward_function_name or verl.DEFAULT_REWARD_FUNCTION_NAME
    name_key = (
        f"{key_of('reward_function_name')}={quoted(name)}" if run.reward_function_name
        else f"{key_of('reward_function_name')} (unset: verl's default name {quoted(name)})"
    )
    try:
        tree = ast.parse(source, filename=shown)
    except (SyntaxError, ValueError) as error:
        where = f" at line {error.lineno}" if getattr(error, "lineno", None) else ""
        return [
            f"{path_key}: {shown} does not parse ({type(error).__name__}{where}: "
            f"{getattr(error, 'msg', error)}): verl loads it in every reward worker and would "
            f"fail there. Fix it (`python3 -m py_compile {shown}` shows the error)"
        ]
    defined = _top_level_names(tree.body)
    if name not in defined:
        functions = [n for n, node in defined.items() if isinstance(node, _FUNCTIONS)]
        close = difflib.get_close_matches(name, functions, n=1, cutoff=0.6)
        hint = f" Did you mean {quoted(close[0])}?" if close else ""
        listed = ", ".join(functions) or "no function"
        return [
            f"{name_key} is not defined in {path_key} (it defines {listed}).{hint} Set "
            f"{key_of('reward_function_name')} to the function verl should call"
        ]
    node = defined[name]
    if not isinstance(node, _FUNCTIONS):
        return []  # bound by an import or an assignment: its signature is not readable here
    return _signature_problems(node, name_key, path_key, run, key_of)


_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)


def _top_level_names(body: list[ast.stmt]) -> dict[str, ast.AST]:
    """The names a module binds when it is run, each with its last binding: definitions,
    assignments and imports, inside module-level if/try/with blocks too."""
    names: dict[str, ast.AST] = {}
    for node in body:
        if isinstance(node, (*_FUNCTIONS, ast.ClassDef)):
            names[node.name] = node
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                for leaf in ast.walk(target):
                    if isinstance(leaf, ast.Name):
                        names[leaf.id] = node
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                names[(alias.asname or alias.name).split(".")[0]] = node
        elif isinstance(node, (ast.If, ast.Try, ast.With)):
            nested = [*node.body, *getattr(node, "orelse", []), *getattr(node, "finalbody", [])]
            for handler in getattr(node, "handlers", []):
                nested += handler.body
            names.update(_top_level_names(nested))
    return names


def _signature_problems(
    node: ast.FunctionDef | ast.AsyncFunctionDef, name_key: str, path_key: str,
    run: GrpoRunConfig, key_of: KeyOf,
) -> list[str]:
    args = node.args
    by_keyword = {a.arg for a in [*args.args, *args.kwonlyargs]}
    call = ", ".join(f"{k}=..." for k in verl.REWARD_CALL_KEYWORDS)
    problems = []
    if args.kwarg is None:
        missing = [k for k in verl.REWARD_CALL_KEYWORDS if k not in by_keyword]
        if missing:
            problems.append(
                f"{name_key} in {path_key} (line {node.lineno}) takes no keyword "
                f"{', '.join(missing)}, but verl calls it as {node.name}({call}) for every "
                f"response: add the parameters (or **kwargs), e.g. `def {node.name}(data_source, "
                "solution_str, ground_truth, extra_info=None)`"
            )
    prefix = verl.REWARD_KWARGS + "."
    given = set(verl.REWARD_CALL_KEYWORDS) | {
        key.lstrip("+~")[len(prefix):] for key in run.extra_overrides
        if key.lstrip("+~").startswith(prefix)
    }
    positional = [*args.posonlyargs, *args.args]
    required = positional[: len(positional) - len(args.defaults)]
    required += [a for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is None]
    unpassed = [a.arg for a in required if a.arg not in given]
    if unpassed:
        problems.append(
            f"{name_key} in {path_key} (line {node.lineno}) requires {', '.join(unpassed)}, "
            f"which verl does not pass (it calls {node.name}({call})): give "
            f"{'them defaults' if len(unpassed) > 1 else 'it a default'}, or pass "
            f"{'them' if len(unpassed) > 1 else 'it'} with `pulumi config set --path "
            f"'{key_of('extra_overrides')}[\"{prefix}{unpassed[0]}\"]' <value>`"
        )
    return problems


# --- Data files ---------------------------------------------------------------------------------

def data_file_problems(key: str, value: str, path: Path, run: GrpoRunConfig,
                       key_of: KeyOf) -> list[str]:
    """A local data file verl's RL dataset could not read, or whose rows' reward verl has none
    for; [] if none."""
    shown = f"{key}={quoted(value)}"
    if problem := suffix_problem(key, value):
        return [problem]
    if not value.endswith(".parquet"):
        return []  # JSON: read by `datasets` as it is; its rows are not checked here
    import pyarrow  # the plan's one use of pyarrow: a parquet file's schema and one column
    import pyarrow.parquet as parquet

    try:
        schema = parquet.read_schema(path)
    except (pyarrow.ArrowException, OSError) as error:
        return [
            f"{shown} is not a parquet file ({error}): verl would fail reading it when the job "
            "starts. Write it with pandas' or datasets' to_parquet (verl's "
            "examples/data_preprocess scripts do)"
        ]
    if overridden(run, verl.CUSTOM_DATASET_KEY)[0]:
        return []  # a dataset class of the user's own reads the rows its own way
    problems = _column_problems(shown, schema, run, key_of)
    if not problems and not _reward_set_otherwise(run):
        problems += _data_source_problems(shown, path, run, key_of)
    return problems


def suffix_problem(key: str, value: str) -> str | None:
    if value.endswith(verl.DATA_FILE_SUFFIXES):
        return None
    return (
        f"{key}={quoted(value)} is not a file verl's RL dataset reads: it reads "
        f"{', '.join(verl.DATA_FILE_SUFFIXES)} files by their suffix (and raises 'Unsupported "
        "file format' otherwise); write the data as parquet (pandas' or datasets' to_parquet) "
        "and name it <name>.parquet"
    )


def _column_problems(shown: str, schema, run: GrpoRunConfig, key_of: KeyOf) -> list[str]:
    import pyarrow as pa

    set_key, value = overridden(run, verl.PROMPT_KEY[0])
    prompt = str(value) if set_key and value is not None else verl.PROMPT_KEY[1]
    columns = schema.names
    has = f"its columns are {', '.join(columns) or 'none'}"
    chat = "a list of chat messages, [{'role': 'user', 'content': '...'}]"
    problems = []
    if prompt not in columns:
        problems.append(
            f"{shown} has no column {quoted(prompt)} ({has}): verl's RL dataset reads each "
            f"prompt there ({verl.PROMPT_KEY[0]}) as {chat}. Add it, or set "
            f"`{key_of('extra_overrides')}[\"{verl.PROMPT_KEY[0]}\"]` to the column that holds them"
        )
    else:
        kind = schema.field(prompt).type
        item = kind.value_type if pa.types.is_list(kind) or pa.types.is_large_list(kind) else None
        if item is None or not pa.types.is_struct(item) or not all(
                item.get_field_index(f) >= 0 for f in verl.CHAT_MESSAGE_FIELDS):
            problems.append(
                f"{shown}: column {quoted(prompt)} is {kind}, but verl reads {chat} (each a "
                "role and a content): write the prompt in chat form (verl's "
                "examples/data_preprocess scripts do)"
            )
    if verl.DATA_SOURCE_COLUMN not in columns:
        problems.append(
            f"{shown} has no column {quoted(verl.DATA_SOURCE_COLUMN)} ({has}): verl's reward "
            "reads it for every response (it picks the reward of the row's dataset). Add it, "
            "e.g. the dataset's name"
        )
    outer, inner = verl.GROUND_TRUTH_COLUMN
    if outer not in columns:
        problems.append(
            f"{shown} has no column {quoted(outer)} ({has}): verl's reward reads each row's "
            f"{outer}['{inner}']. Add it, as a struct {{'{inner}': <the answer>}}"
        )
    elif not pa.types.is_struct(kind := schema.field(outer).type) or kind.get_field_index(inner) < 0:
        problems.append(
            f"{shown}: column {quoted(outer)} is {kind}, but verl's reward reads each row's "
            f"{outer}['{inner}']: write it as a struct {{'{inner}': <the answer>}}"
        )
    extra = verl.EXTRA_INFO_COLUMN
    if extra in columns and not (pa.types.is_struct(kind := schema.field(extra).type)
                                 or pa.types.is_null(kind) or pa.types.is_map(kind)):
        problems.append(
            f"{shown}: column {quoted(extra)} is {kind}, but verl reads it as a dict per row "
            "(its index and tool arguments): write it as a struct, or leave the column out"
        )
    return problems


def _reward_set_otherwise(run: GrpoRunConfig) -> bool:
    """A reward of the user's own (the file, or another reward manager or model) replaces
    verl's default reward and its data_source rule."""
    return run.reward_function_path is not None or any(
        overridden(run, key)[0] for key in verl.REWARD_MANAGER_KEYS)


def _data_source_problems(shown: str, path: Path, run: GrpoRunConfig, key_of: KeyOf) -> list[str]:
    import pyarrow.parquet as parquet

    column = parquet.read_table(path, columns=[verl.DATA_SOURCE_COLUMN]).column(0)
    values = sorted({str(v) for v in column.unique().to_pylist() if v is not None})
    unknown = [v for v in values if not has_builtin_reward(v)]
    if not unknown:
        return []
    exact, prefixes = reward_data_sources()
    named = ", ".join(quoted(v) for v in unknown[:SHOWN])
    more = f" and {len(unknown) - SHOWN} more" if len(unknown) > SHOWN else ""
    return [
        f"{shown}: its rows' {verl.DATA_SOURCE_COLUMN} {named}{more} has no reward built into "
        f"verl at the pinned ref ({len(exact)} names, such as openai/gsm8k and lighteval/MATH, "
        f"and {', '.join(p + '*' for p in prefixes)}; third_party/verl/reward_data_sources.json), "
        f"and {key_of('reward_function_path')} is not set: verl would raise "
        "NotImplementedError at the first reward, after the cluster and the model are up. Set "
        f"{key_of('reward_function_path')} (and {key_of('reward_function_name')}) to a reward of "
        "yours (docs/your-own-experiment.md), or write one of verl's names as the data_source"
    ]


# --- Paths the image must hold ----------------------------------------------------------------

def image_warnings(run: GrpoRunConfig, key_of: KeyOf) -> list[str]:
    """An absolute path off the bucket's mount is read inside the pods' image: fine for a file
    baked into it, a failure hours in for a path on the machine that runs Pulumi."""
    warnings = []
    for field in PATH_FIELDS:
        value = getattr(run, field)
        if value is None or not value.startswith("/"):
            continue
        if value == DATA_MOUNT or value.startswith(DATA_MOUNT + "/"):
            continue
        warnings.append(
            f"{key_of(field)}={quoted(value)} is not under {DATA_MOUNT} (the stack's bucket): it "
            "must exist in the image the Ray pods run, or the job fails when it reads it. For a "
            f"file of yours, give it relative to {key_of('working_dir')}, or as "
            f"gs://<the stack's bucket>/... ({DATA_MOUNT}/... in the pods)"
        )
    return warnings
