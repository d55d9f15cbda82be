"""Every row of the special-purpose table (webfetch/addresses.py, from the IANA IPv4 and IPv6
Special-Purpose Address Registries) judged by an address inside it, and every IPv6 form that
carries an IPv4 address judged as what it carries. The expectations are written out here, not
read from the table: a row changed by mistake fails, and a row added without one fails too."""

from __future__ import annotations

import ipaddress

import pytest

from webfetch.addresses import ALLOWED, AS_IPV4, SPECIAL_RANGES, refusal, special_range

ip = ipaddress.ip_address

# (block as in the table, an address inside it, the fetcher's verdict: a reason or None)
EXPECTED: list[tuple[str, str, str | None]] = [
    # IANA IPv4 Special-Purpose Address Registry
    ("0.0.0.0/8", "0.1.2.3", "this_network"),
    ("0.0.0.0/32", "0.0.0.0", "unspecified"),
    ("10.0.0.0/8", "10.255.0.1", "private"),
    ("100.64.0.0/10", "100.127.255.254", "cgnat"),
    ("127.0.0.0/8", "127.3.2.1", "loopback"),
    ("169.254.0.0/16", "169.254.1.1", "link_local"),
    ("172.16.0.0/12", "172.31.255.255", "private"),
    ("192.0.0.0/24", "192.0.0.200", "reserved"),
    ("192.0.0.0/29", "192.0.0.1", "reserved"),
    ("192.0.0.8/32", "192.0.0.8", "reserved"),
    ("192.0.0.9/32", "192.0.0.9", "anycast_service"),
    ("192.0.0.10/32", "192.0.0.10", "anycast_service"),
    ("192.0.0.170/32", "192.0.0.170", "reserved"),
    ("192.0.0.171/32", "192.0.0.171", "reserved"),
    ("192.0.2.0/24", "192.0.2.1", "documentation"),
    ("192.31.196.0/24", "192.31.196.1", None),
    ("192.52.193.0/24", "192.52.193.1", None),
    ("192.88.99.0/24", "192.88.99.1", "reserved"),
    ("192.168.0.0/16", "192.168.1.1", "private"),
    ("192.175.48.0/24", "192.175.48.6", None),
    ("198.18.0.0/15", "198.19.255.1", "benchmarking"),
    ("198.51.100.0/24", "198.51.100.7", "documentation"),
    ("203.0.113.0/24", "203.0.113.9", "documentation"),
    ("240.0.0.0/4", "250.1.2.3", "reserved"),
    ("255.255.255.255/32", "255.255.255.255", "broadcast"),
    # IANA IPv6 Special-Purpose Address Registry
    ("::1/128", "::1", "loopback"),
    ("::/128", "::", "unspecified"),
    ("::ffff:0:0/96", "::ffff:8.8.8.8", None),  # judged as 8.8.8.8
    ("64:ff9b::/96", "64:ff9b::808:808", None),  # NAT64 of 8.8.8.8
    ("64:ff9b:1::/48", "64:ff9b:1::808:808", "nat64_local"),
    ("100::/64", "100::1", "reserved"),
    ("100:0:0:1::/64", "100:0:0:1::1", "reserved"),
    ("2001::/23", "2001:1ff::1", "reserved"),
    ("2001::/32", "2001:0:4136:e378:8000:63bf:f7f7:f7f7", None),  # Teredo, client 8.8.8.8
    ("2001:1::1/128", "2001:1::1", "anycast_service"),
    ("2001:1::2/128", "2001:1::2", "anycast_service"),
    ("2001:1::3/128", "2001:1::3", "anycast_service"),
    ("2001:2::/48", "2001:2::1", "benchmarking"),
    ("2001:3::/32", "2001:3::1", None),
    ("2001:4:112::/48", "2001:4:112::1", None),
    ("2001:10::/28", "2001:10::1", "reserved"),
    ("2001:20::/28", "2001:20::1", None),
    ("2001:30::/28", "2001:30::1", None),
    ("2001:db8::/32", "2001:db8::1", "documentation"),
    ("2002::/16", "2002:808:808::1", None),  # 6to4 of 8.8.8.8
    ("2620:4f:8000::/48", "2620:4f:8000::42", None),
    ("3fff::/20", "3fff:fff::1", "documentation"),
    ("5f00::/16", "5f00::1", "reserved"),
    ("fc00::/7", "fd12:3456::1", "private"),
    ("fe80::/10", "fe80::1", "link_local"),
    # Beyond the registries
    ("224.0.0.0/4", "239.255.255.250", "multicast"),
    ("ff00::/8", "ff02::1", "multicast"),
    ("fec0::/10", "fec0::1", "site_local"),
    ("::/8", "::2:0:0:1", "reserved"),
    ("::/96", "::8.8.8.8", "ipv4_compatible"),
    ("::ffff:0:0:0/96", "::ffff:0:8.8.8.8", "ipv4_translated"),
    ("169.254.169.254/32", "169.254.169.254", "metadata"),
    ("169.254.170.2/32", "169.254.170.2", "metadata"),
    ("100.100.100.200/32", "100.100.100.200", "metadata"),
    ("168.63.129.16/32", "168.63.129.16", "metadata"),
    ("fd00:ec2::254/128", "fd00:ec2::254", "metadata"),
]


@pytest.mark.parametrize(("block", "address", "verdict"), EXPECTED)
def test_an_address_in_each_special_block_is_judged_by_that_block(block, address, verdict):
    assert str(special_range(ip(address)).network) == str(ipaddress.ip_network(block))
    assert refusal(ip(address)) == verdict


def test_every_row_of_the_table_has_its_expectation_and_no_row_is_written_twice():
    table = [str(row.network) for row in SPECIAL_RANGES]
    assert sorted(table) == sorted(str(ipaddress.ip_network(b)) for b, _, _ in EXPECTED)
    assert len(set(table)) == len(table)


def test_each_row_cites_its_source_and_only_reachable_blocks_are_allowed():
    for row in SPECIAL_RANGES:
        assert row.name and row.source, row
        if row.verdict == ALLOWED:
            assert row.globally_reachable is True, row
        if row.globally_reachable is False:
            # Refused, or judged by the IPv4 address it carries (a socket reaches that one).
            assert row.verdict != ALLOWED, row
            assert row.verdict != AS_IPV4 or row.name == "IPv4-mapped Address", row


# Every IPv6 form carrying an IPv4 address, built around the carried address.
def mapped(v4: str) -> str:
    return f"::ffff:{v4}"


def translated(v4: str) -> str:
    return f"::ffff:0:{v4}"


def compatible(v4: str) -> str:
    return f"::{v4}"


def sixtofour(v4: str) -> str:
    packed = ipaddress.IPv4Address(v4).packed
    return str(ipaddress.IPv6Address(b"\x20\x02" + packed + bytes(10)))


def nat64(v4: str) -> str:
    return f"64:ff9b::{v4}"


def nat64_local(v4: str) -> str:
    return f"64:ff9b:1::{v4}"


def teredo(v4: str) -> str:
    client = int(ipaddress.IPv4Address(v4)) ^ 0xFFFFFFFF  # Teredo obscures the client
    return str(ipaddress.IPv6Address((0x2001 << 112) | (0x4136E378 << 64) | client))


FORMS = [mapped, translated, compatible, sixtofour, nat64, teredo]
CARRIED = [
    ("127.0.0.1", "loopback"),
    ("10.1.2.3", "private"),
    ("172.16.0.1", "private"),
    ("192.168.0.1", "private"),
    ("169.254.169.254", "metadata"),
    ("169.254.1.1", "link_local"),
    ("100.64.0.1", "cgnat"),
    ("0.0.0.0", "unspecified"),
    ("198.18.0.1", "benchmarking"),
    ("192.0.0.8", "reserved"),
    ("240.0.0.1", "reserved"),
    ("224.0.0.1", "multicast"),
]


@pytest.mark.parametrize("form", FORMS, ids=lambda f: f.__name__)
@pytest.mark.parametrize(("v4", "reason"), CARRIED)
def test_an_ipv6_form_carrying_a_non_public_ipv4_is_refused_as_that_address(form, v4, reason):
    assert refusal(ip(form(v4))) == reason


@pytest.mark.parametrize(("v4", "reason"), CARRIED)
def test_local_use_nat64_is_refused_whatever_it_carries(v4, reason):
    # RFC 8215 leaves its format to the operator: nothing to read the carried address from.
    assert refusal(ip(nat64_local(v4))) == "nat64_local"


@pytest.mark.parametrize(
    ("form", "verdict"),
    [
        (mapped, None),
        (sixtofour, None),
        (nat64, None),
        (teredo, None),
        (translated, "ipv4_translated"),
        (compatible, "ipv4_compatible"),
        (nat64_local, "nat64_local"),
    ],
    ids=lambda v: getattr(v, "__name__", str(v)),
)
def test_an_ipv6_form_carrying_a_public_ipv4_is_judged_by_its_own_block(form, verdict):
    assert refusal(ip(form("8.8.8.8"))) == verdict


@pytest.mark.parametrize(
    ("address", "verdict"),
    [
        ("8.8.8.8", None),
        ("93.184.216.34", None),
        ("2606:4700:4700::1111", None),
        ("2a00:1450:4001::1", None),
        ("4000::1", "reserved"),  # outside 2000::/3: unassigned
        ("e000::1", "reserved"),
        ("::ffff:0:127.0.0.1", "loopback"),  # the address
    ],
)
def test_addresses_outside_every_block(address, verdict):
    assert refusal(ip(address)) == verdict
