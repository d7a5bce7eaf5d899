"""Every example in README.md and docs/ runs as written.

Per document, in a fresh working directory: the ```python blocks run in order in one namespace
(a later block may use what an earlier one made, as a reader following the page would; a block
that opens with ``# name.py`` is that module, written where the next blocks import it), the
```sh blocks run through bash with the installed ``tierlog`` command, the ```toml blocks
parse, and every option a ```text usage synopsis shows is one its command's ``--help`` knows.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")),
        ROOT / "examples" / "plugin-key-index" / "README.md"]
FENCE = re.compile(r"^```(\w+)\n(.*?)^```$", re.MULTILINE | re.DOTALL)
#: Shell blocks that are not run here, and why (matched by their first line).
NOT_RUN = {
    # The README's opening commands: CI runs `make test` itself, and `make demo` is the
    # demo that docs/cli.md's example runs (smaller) through `tierlog demo`.
    "make demo": "run by CI / by the cli.md example",
    # Installing into the test environment would add the plugin to every other test; the
    # same directory is pip-installed by tests/test_plugin_key_index.py.
    "pip install ./examples/plugin-key-index": "installed by test_plugin_key_index.py",
    # A server runs until stopped; the README's next example runs the same server in-process
    # (BackgroundServer), and tests/test_server_*.py run `tierlog serve` as a subprocess.
    "tierlog serve --data-dir ./data --set listeners=PLAINTEXT://127.0.0.1:9092":
        "long-running; the in-process example and the server tests run it",
}


def blocks(doc: Path) -> list[tuple[str, str]]:
    return [(m.group(1), m.group(2)) for m in FENCE.finditer(doc.read_text())]


def test_every_document_has_examples() -> None:
    for doc in DOCS:
        assert blocks(doc), f"{doc} has no fenced examples"


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_examples_run_as_written(doc: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                 request: pytest.FixtureRequest,
                                 caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    namespace: dict[str, object] = {"__name__": f"doc_{doc.stem}"}
    bin_dir = str(Path(sys.executable).parent)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
           "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    for number, (language, text) in enumerate(blocks(doc), 1):
        where = f"{doc.name} example {number}"
        module = re.match(r"# (\w+)\.py\n", text)
        if language == "python" and module:
            (tmp_path / f"{module.group(1)}.py").write_text(text)
            monkeypatch.delitem(sys.modules, module.group(1), raising=False)
        elif language == "python":
            if "spark." in text and "spark" not in namespace:
                namespace["spark"] = request.getfixturevalue("spark")
            exec(compile(text, where, "exec"), namespace)  # noqa: S102 - the docs' own code
        elif language == "sh":
            if text.splitlines()[0].split("#")[0].strip() in NOT_RUN:
                continue
            proc = subprocess.run(["bash", "-euo", "pipefail", "-c", text], cwd=tmp_path,
                                  env=env, capture_output=True, text=True, timeout=300,
                                  check=False)
            assert proc.returncode == 0, f"{where} failed:\n{proc.stdout}\n{proc.stderr}"
        elif language == "toml":
            tomllib.loads(text)
        elif language == "text":
            _check_synopsis(text, where, env)
        else:
            pytest.fail(f"{where}: unknown example language {language!r}")
    # A plugin example whose hook raised is isolated by the engine: it must not have happened.
    assert not [r.getMessage() for r in caplog.records if r.name == "tierlog.events"]


def _check_synopsis(text: str, where: str, env: dict[str, str]) -> None:
    """Each ``tierlog VERB ...`` synopsis names only options that ``tierlog VERB --help`` has."""
    for line in re.split(r"\n(?=tierlog )", text):
        words = line.split()
        if len(words) < 2 or words[0] != "tierlog":
            continue
        verb = words[1]
        helptext = subprocess.run(["tierlog", verb, "--help"], env=env, capture_output=True,
                                  text=True, timeout=60, check=True).stdout
        for option in set(re.findall(r"--[a-z][a-z-]*", line)):
            assert option in helptext, f"{where}: `tierlog {verb}` has no {option}"
