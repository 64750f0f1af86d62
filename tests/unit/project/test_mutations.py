"""The mutation catalogue (tests/support/mutations.py) follows the code: every mutation applies to
its file as it is (its snippet there exactly once), changes it, and names quick tests that exist."""
from __future__ import annotations

from mutate import stale
from mutations import MUTATIONS
from paths import ROOT


def test_every_mutation_applies_once_to_its_file_as_it_is():
    problems = [p for p in map(stale, MUTATIONS) if p]
    assert not problems, "update tests/support/mutations.py to the code: " + "; ".join(problems)


def test_every_mutation_is_named_once_changes_its_file_and_names_its_tests():
    assert len({m.id for m in MUTATIONS}) == len(MUTATIONS)
    for m in MUTATIONS:
        assert m.old != m.new and m.why, m.id
        assert m.tests and all((ROOT / t).exists() and t.startswith("tests/unit/") for t in m.tests), m.id


def test_the_catalogue_covers_the_modules_it_claims():
    areas = {m.area for m in MUTATIONS}
    assert areas == {"emulator/design", "emulator/results", "emulator/fullsize.py", "tiers/fileops.py",
                     "tiers/safepath.py"}
