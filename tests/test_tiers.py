"""The tier markers' check (tests/conftest.py): a fixture that needs a tier's environment, used without that
tier's marker, is found; every fixture NEEDS names exists; the slow tier is never another tier too. The nested
runs in .agent/ of the tests marked `agent_rerun` (tests/helpers.py's in_agent_env: one per module, each test's
outcome its own)."""
import ast
import sys
import textwrap

import pytest

from tests.conftest import NEEDS, TIERS, tiers_missing, tiers_of
from tests.helpers import AGENT_RERUN, ROOT, agent_rerun, junit_nodeid


def test_a_fixture_used_without_its_tiers_marker_is_found():
    assert tiers_missing(["tmp_path", "cloud"], set()) == {"emulators"}
    assert tiers_missing(["tmp_path", "cloud"], {"emulators"}) == set()
    assert tiers_missing(["cloud", "installed"], {"slow"}) == {"emulators", "packaging"}
    assert tiers_missing(["tmp_path"], set()) == set()


def test_every_fixture_needs_names_is_defined_and_every_tier_it_gives_is_one():
    defined = set()
    for path in (ROOT / "tests").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef) and any("fixture" in ast.unparse(d) for d in node.decorator_list):
                defined.add(node.name)
    assert set(NEEDS) <= defined, set(NEEDS) - defined
    assert set(NEEDS.values()) <= set(TIERS)


def test_collected_tests_carry_the_tiers_their_fixtures_need_and_slow_is_alone(request):
    items = request.session.items
    assert len(items) >= 1
    for item in items:
        tiers = tiers_of(item)
        assert not tiers_missing(item.fixturenames, tiers), item.nodeid
        assert "slow" not in tiers or tiers == {"slow"}, item.nodeid


def test_every_test_calling_in_agent_env_is_marked_agent_rerun_and_every_marked_one_calls_it():
    """in_agent_env reruns, in .agent/, the marked tests of a module together: a test calling it unmarked would
    fail there (it says so); a marked one not calling it would run twice for nothing."""
    calling, marked = set(), set()
    for path in (ROOT / "tests").rglob("test_*.py"):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test_"):
                name = f"{path.relative_to(ROOT)}::{node.name}"
                if any(isinstance(n, ast.Call) and ast.unparse(n.func) == "in_agent_env" for n in ast.walk(node)):
                    calling.add(name)
                if any(ast.unparse(d) == f"pytest.mark.{AGENT_RERUN}" for d in node.decorator_list):
                    marked.add(name)
    assert calling and calling == marked, (calling - marked, marked - calling)


def test_a_test_modules_nested_run_is_read_back_test_by_test():
    assert junit_nodeid("tests.a.test_b", "test_c[x-y]", ["tests/a/test_b.py::test_c", "tests/a/test_b.py::test_c[x-y]"]) \
        == "tests/a/test_b.py::test_c[x-y]"
    assert junit_nodeid("tests.a.test_b.Case", "test_c", ["tests/a/test_b.py::test_c", "tests/a/test_b.py::Case::test_c"]) \
        == "tests/a/test_b.py::Case::test_c"
    assert junit_nodeid("tests.a.test_b", "test_d", ["tests/a/test_b.py::test_c"]) == ""


@pytest.mark.slow
def test_one_nested_run_gives_each_test_its_own_outcome(tmp_path):
    """agent_rerun (here with this interpreter, on a module of its own): each node's outcome is its own (a
    failure, a skip, an error in set-up beside tests that pass), with why; when pytest itself fails (a node
    that is not there), every node fails with its output."""
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "test_nested.py").write_text(textwrap.dedent("""
        import pytest

        @pytest.fixture
        def broken():
            raise RuntimeError("its set-up broke")

        def test_passes():
            pass

        @pytest.mark.parametrize("n", [1, 2])
        def test_one_of_two_fails(n):
            assert n == 1, "two is not one"

        def test_skips():
            pytest.skip("not here")

        def test_set_up_errors(broken):
            pass
        """))
    ids = [f"test_nested.py::{name}" for name in ("test_passes", "test_one_of_two_fails[1]", "test_one_of_two_fails[2]",
                                                  "test_skips", "test_set_up_errors")]
    got = agent_rerun(ids, python=sys.executable, cwd=tmp_path)
    assert {i: got[i][0] for i in ids} == dict(zip(ids, ["passed", "passed", "failed", "skipped", "error"]))
    assert "two is not one" in got[ids[2]][1] and "its set-up broke" in got[ids[4]][1] and "not here" in got[ids[3]][1]
    assert "(exit status 1)" in got[""]
    missing = agent_rerun([ids[0], "test_nested.py::test_not_there"], python=sys.executable, cwd=tmp_path)
    assert missing[ids[0]] == missing["test_nested.py::test_not_there"] == ("failed", missing[""])
    assert "(exit status 4)" in missing[""] and "test_not_there" in missing[""]
    # a node the report does not name (it did not run) is not taken for passed
    assert agent_rerun([ids[0]], python="true", cwd=tmp_path)[ids[0]][0] == "not run"
