"""Units as datasheets write them (issue 53, reproduction 5): a lower-case b is a bit, a capital B a
byte, whatever the prefix, binary ones included: ``Gib/s`` is gibibits (1/8 of ``GiB/s``), never
read as gibibytes; a size in bits is refused."""
from __future__ import annotations

import pytest

from emulator.errors import UserError
from emulator.units import BINARY, BITS, GIB, parse_rate, parse_size, rate_and_family


@pytest.mark.parametrize("text,bps,family", [
    ("1GiB/s", GIB, BINARY), ("1GiBps", GIB, BINARY),
    ("8Gib/s", GIB, BITS), ("8Gibit/s", GIB, BITS), ("8Gibps", GIB, BITS), ("8 Mib/s", 1 << 20, BITS),
    ("400Gb/s", 50e9, BITS)])
def test_a_small_b_is_a_bit_binary_prefixes_included(text, bps, family):
    assert rate_and_family(text, "k") == (pytest.approx(bps), family)


def test_gibibits_are_an_eighth_of_gibibytes():
    assert parse_rate("100Gib/s", "k") * 8 == pytest.approx(parse_rate("100GiB/s", "k"))


@pytest.mark.parametrize("text", ["512Gib", "1Tib", "8Gbit"])
def test_a_size_in_bits_is_refused(text):
    with pytest.raises(UserError, match=r"^design.x: .*'b' is a bit"):
        parse_size(text, "design.x")
