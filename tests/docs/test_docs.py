"""The README is a front page, every relative link of the documentation resolves, and every
repository path the documentation, docstrings and comments name exists.

Plain Python, no Beam and no evalbeam import: the markdown links of README.md and
docs/*.md are parsed, each relative target must exist, and each #anchor must be the
GitHub slug of a heading of its target."""
import ast
import io
import re
import tokenize
from pathlib import Path

import pytest

from tests.helpers import ROOT

README_MAX_LINES = 250

FENCE = re.compile(r"^\s*(```|~~~)")
HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
INLINE_CODE = re.compile(r"(`+)(?:.+?)\1")
# [text](target) and ![alt](target); the target may have a "title" after it
INLINE_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^()\s>]*(?:\([^()\s]*\)[^()\s>]*)*)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE_LINK = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+\"[^\"]*\")?\s*$")
HTML_LINK = re.compile(r"""<(?:a|img)\s[^>]*?(?:href|src)=["']([^"']+)["']""", re.IGNORECASE)
EXTERNAL = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")  # http:, https:, mailto:, gs:, ...


def _text_lines(markdown: str):
    """(line number, line) outside fenced code blocks."""
    in_fence = None
    for number, line in enumerate(markdown.splitlines(), 1):
        fence = FENCE.match(line)
        if fence:
            if in_fence is None:
                in_fence = fence.group(1)
            elif fence.group(1) == in_fence:
                in_fence = None
            continue
        if in_fence is None:
            yield number, line


def links(markdown: str) -> list[tuple[int, str]]:
    """Every link target of a markdown text, with its line number."""
    found = []
    for number, line in _text_lines(markdown):
        line = INLINE_CODE.sub("", line)  # `[a](b)` in code is not a link
        for pattern in (INLINE_LINK, REFERENCE_LINK, HTML_LINK):
            found += [(number, m.group(1)) for m in pattern.finditer(line)]
    return found


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: inline markup dropped, lower case, punctuation other
    than - and _ removed, each space a hyphen."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link: its text
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML
    text = text.replace("`", "").replace("*", "")
    text = re.sub(r"(?<!\w)_+|_+(?!\w)", "", text)  # _emphasis_, not snake_case
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def anchors(markdown: str) -> set[str]:
    """The anchors of a markdown text's headings; a repeated one gets -1, -2, ... as on GitHub."""
    seen: dict[str, int] = {}
    result = set()
    for _, line in _text_lines(markdown):
        heading = HEADING.match(line)
        if not heading:
            continue
        base = slug(heading.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        result.add(base if count == 0 else f"{base}-{count}")
    return result


def broken_links(path: Path) -> list[str]:
    """What is wrong with the relative links of one markdown file, one message each."""
    problems = []
    for number, target in links(path.read_text(encoding="utf-8")):
        if not target or EXTERNAL.match(target):
            continue
        file_part, _, anchor = target.partition("#")
        linked = (path.parent / file_part).resolve() if file_part else path
        where = f"{path.name}:{number}: {target}"
        if not linked.exists():
            problems.append(f"{where}: no file {linked}")
        elif anchor and linked.suffix == ".md":
            if anchor.lower() not in anchors(linked.read_text(encoding="utf-8")):
                problems.append(f"{where}: no heading with the anchor #{anchor} in {linked.name}")
        elif anchor:
            problems.append(f"{where}: an anchor into a file that is not markdown")
    return problems


def documentation() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


@pytest.mark.parametrize("path", documentation(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(path):
    assert broken_links(path) == []


def test_the_docs_pages_have_links_to_check():
    assert len(documentation()) > 1
    assert any(not EXTERNAL.match(t) for _, t in links((ROOT / "README.md").read_text(encoding="utf-8")))


def test_readme_is_a_front_page():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines; at most {README_MAX_LINES}"


def test_every_docs_page_is_linked_from_the_readme():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    linked = {(ROOT / t.partition("#")[0]).resolve() for _, t in links(readme) if not EXTERNAL.match(t)}
    unlinked = [p.name for p in documentation()[1:] if p.resolve() not in linked]
    assert unlinked == []


def test_slugs_are_githubs():
    assert slug("Agent judges (Vertex's and ADK's)") == "agent-judges-vertexs-and-adks"
    assert slug("Airflow (Cloud Composer)") == "airflow-cloud-composer"
    assert slug("`evalbeam run` and `--set`") == "evalbeam-run-and---set"
    assert slug("judge_cache and rubrics") == "judge_cache-and-rubrics"
    assert slug("A million rows in bounded memory") == "a-million-rows-in-bounded-memory"
    assert anchors("# Speed\n## Crashes\n## Crashes\n```\n# not a heading\n```\n## `evalbeam plan`\n") == {
        "speed", "crashes", "crashes-1", "evalbeam-plan"}


def test_a_broken_link_is_found(tmp_path):
    (tmp_path / "other.md").write_text("# Other page\n## A section\n", encoding="utf-8")
    page = tmp_path / "page.md"
    page.write_text(
        "# Page\n"
        "[fine](other.md) [fine too](other.md#a-section) [here](#page) [web](https://example.com)\n"
        "`[in code](missing-in-code.md)`\n"
        "```\n[in a fence](missing-in-fence.md)\n```\n"
        "[gone](missing.md) [no such heading](other.md#nowhere) ![picture](img/none.png)\n"
        "[ref]: missing-ref.md\n",
        encoding="utf-8")
    problems = broken_links(page)
    assert [p.split(": ")[1] for p in problems] == [
        "missing.md", "other.md#nowhere", "img/none.png", "missing-ref.md"]


# Repository paths in prose: a top-level folder of the repository, then a path. Not preceded by
# a word character, "/", ".", "@", ":" or "-", so that URLs (https://..., gs://...), other
# projects' paths (sacrebleu/metrics/...) and installed paths (evalbeam/configs/...) are not taken.
TOP_FOLDERS = ("bench", "configs", "docs", "metrics", "pipelines", "tests", "transforms")
REPOSITORY_PATH = re.compile(r"(?<![\w./@:-])(?:" + "|".join(TOP_FOLDERS) + r")/[\w./*?<>{}\[\]-]*")
# A test module named without its folder (`test_text.py`): one of that name must be under tests/.
BARE_TEST_MODULE = re.compile(r"(?<![\w./-])test_\w+\.py\b")
# Files the documentation names as a user's own, not the repository's.
USERS_FILES = {"configs/my_eval.yaml"}


def named_paths(text: str) -> list[str]:
    """The repository paths a text names: a test's `::name` and trailing punctuation dropped; a
    test module named alone (`test_text.py`) as a glob under tests/."""
    return ([m.group(0).split("::")[0].rstrip(".,:;") for m in REPOSITORY_PATH.finditer(text)]
            + [f"tests/**/{m.group(0)}" for m in BARE_TEST_MODULE.finditer(text)])


def path_exists(root: Path, path: str) -> bool:
    """Whether a named path is in the repository: a file or folder; a glob (`configs/*.yaml`)
    matching one at least; a module's attribute (`metrics/judge/settings.JudgeSettings`) in an
    existing module. A placeholder (`<run_id>`, `{name}`, `[...]`) is not checked."""
    if path in USERS_FILES or any(c in path for c in "<{["):
        return True
    if "*" in path or "?" in path:
        return next(root.glob(path), None) is not None
    if (root / path).exists():
        return True
    module, dot, _attribute = path.rpartition(".")
    return bool(dot) and "/" in module and (root / f"{module}.py").is_file()


def python_prose(source: str) -> str:
    """A Python file's comments and docstrings (module, classes, functions)."""
    comments = [t.string for t in tokenize.generate_tokens(io.StringIO(source).readline) if t.type == tokenize.COMMENT]
    docstrings = [ast.get_docstring(node, clean=False) for node in ast.walk(ast.parse(source))
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))]
    return "\n".join(comments + [d for d in docstrings if d])


def hash_comments(text: str) -> str:
    """The `#` comments of a Makefile or a YAML file."""
    return "\n".join(line[line.index("#"):] for line in text.splitlines() if "#" in line)


def prose_of_the_tree(root: Path):
    """(file, its text, a function giving the part of it that is prose) for the documentation
    (all prose), the Python files (their comments and docstrings) and the Makefile and the
    configs (their comments). The prose of a Python file is parsed only when its text names a
    missing path: parsing 2 MB of Python for each run would take seconds."""
    for path in [root / "README.md", *sorted((root / "docs").glob("*.md"))]:
        text = path.read_text(encoding="utf-8")
        yield path, text, lambda text=text: text
    for path in [root / "setup.py", *sorted(p for folder in TOP_FOLDERS for p in (root / folder).rglob("*.py"))]:
        if path.exists() and "__pycache__" not in path.parts:
            text = path.read_text(encoding="utf-8")
            yield path, text, lambda text=text: python_prose(text)
    for path in [root / "Makefile", *sorted((root / "configs").rglob("*.yaml"))]:
        if path.exists():
            text = path.read_text(encoding="utf-8")
            yield path, text, lambda text=text: hash_comments(text)


def missing_paths(root: Path) -> list[str]:
    """"file: path" for each path a file's prose names that is not in the repository."""
    problems = []
    for file, text, prose in prose_of_the_tree(root):
        if any(not path_exists(root, p) for p in named_paths(text)):
            problems += [f"{file.relative_to(root)}: {p}" for p in named_paths(prose()) if not path_exists(root, p)]
    return problems


def test_every_repository_path_the_docs_and_comments_name_exists():
    assert missing_paths(ROOT) == []
    # and the check has something to check, in the docs and in the code's prose
    in_docs = [p for file, text, _ in prose_of_the_tree(ROOT) if file.suffix == ".md" for p in named_paths(text)]
    assert len(in_docs) > 100 and "tests/metrics/test_text.py" in in_docs
    assert "tests/transforms/test_adk_files.py" in named_paths(python_prose((ROOT / "transforms/adk_models.py").read_text()))


def test_a_stale_path_is_found_and_urls_globs_and_outputs_are_not(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "metrics").mkdir()
    (tmp_path / "metrics" / "text.py").write_text(
        '"""Scores text; tested by tests/metrics/test_text.py and tests/metrics/test_gone.py::test_x."""\n'
        "# see metrics/text.TEXT, metrics/old.py, test_text.py, test_renamed.py and https://example.com/tests/metrics/nowhere.py\n"
        "X = 'tests/metrics/a_string_not_prose.py'\n", encoding="utf-8")
    (tmp_path / "tests" / "metrics").mkdir(parents=True)
    (tmp_path / "tests" / "metrics" / "test_text.py").write_text("", encoding="utf-8")
    (tmp_path / "README.md").write_text(
        "Results go to `output/<run_id>/`; point `input.uri` at `*.evalset_result.json` or `metrics/*.py`,\n"
        "not `metrics/*.yaml`. `evalbeam/metrics/text.py` is installed; gs://bucket/docs/x.md is a bucket.\n"
        "Edit `configs/my_eval.yaml`, `configs/{name}.yaml`, and see docs/gone.md.\n", encoding="utf-8")
    (tmp_path / "Makefile").write_text("# runs bench/missing.py\nx:\n\techo bench/not_a_comment.py\n", encoding="utf-8")
    assert missing_paths(tmp_path) == [
        "README.md: metrics/*.yaml", "README.md: docs/gone.md",
        "metrics/text.py: metrics/old.py", "metrics/text.py: tests/metrics/test_gone.py",
        "metrics/text.py: tests/**/test_renamed.py",
        "Makefile: bench/missing.py"]


def test_dotted_names_in_the_source_resolve():
    """A comment or docstring naming `pipelines.x.y`, `transforms.x.y`, `metrics.x.y` or `configs.x.y` names a
    module or attribute that exists (names go stale when code moves: pipelines.evaluate.part_bytes is
    pipelines.local.part_bytes)."""
    import importlib

    pattern = re.compile(r"(?<![\w.])((?:pipelines|transforms|metrics|configs)(?:\.[A-Za-z_]\w*)+)")

    def resolves(dotted: str) -> bool:
        parts = dotted.split(".")
        for cut in range(len(parts), 0, -1):  # the longest importable module, then attributes
            try:
                obj = importlib.import_module("evalbeam." + ".".join(parts[:cut]))
            except ImportError:
                continue
            for attr in parts[cut:]:
                if not hasattr(obj, attr):
                    return False
                obj = getattr(obj, attr)
            return True
        return False

    stale = []
    for folder in ("pipelines", "transforms", "metrics", "configs"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                stale += [f"{path.relative_to(ROOT)}:{number}: {m.group(1)}" for m in pattern.finditer(line)
                          if m.group(1).count(".") >= 2 and not resolves(m.group(1))]
    assert not stale, "\n".join(stale)


def test_the_coverage_seeds_the_docs_give_are_the_tests():
    import inspect

    from tests.metrics.statistics.test_ppi import _coverage

    seeds = inspect.signature(_coverage).parameters["seeds"].default
    for doc in ("docs/judges.md", "docs/development.md"):
        said = re.findall(r"(\d+) fixed seeds", (ROOT / doc).read_text(encoding="utf-8"))
        assert said and set(said) == {str(seeds)}, (doc, said, seeds)
