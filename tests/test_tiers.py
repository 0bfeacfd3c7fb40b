"""The tier markers' check (tests/conftest.py): a fixture that needs a tier's environment, used without that
tier's marker, is found; every fixture NEEDS names exists; the slow tier is never another tier too."""
import ast

from tests.conftest import NEEDS, TIERS, tiers_missing, tiers_of
from tests.helpers import ROOT


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
