from __future__ import annotations

import ipaddress

import pytest

from webfetch.addresses import allowed_networks, embedded_ipv4, literal_host, refusal

ip = ipaddress.ip_address


@pytest.mark.parametrize(
    ("address", "reason"),
    [
        ("0.0.0.0", "unspecified"),
        ("::", "unspecified"),
        ("127.0.0.1", "loopback"),
        ("127.255.255.254", "loopback"),
        ("::1", "loopback"),
        ("10.0.0.1", "private"),
        ("172.16.0.1", "private"),
        ("172.31.255.255", "private"),
        ("192.168.1.1", "private"),
        ("fc00::1", "private"),
        ("fd12:3456::1", "private"),
        ("169.254.1.1", "link_local"),
        ("fe80::1", "link_local"),
        ("169.254.169.254", "metadata"),
        ("169.254.170.2", "metadata"),
        ("100.100.100.200", "metadata"),
        ("168.63.129.16", "metadata"),
        ("fd00:ec2::254", "metadata"),
        ("100.64.0.1", "cgnat"),
        ("100.127.255.254", "cgnat"),
        ("224.0.0.1", "multicast"),
        ("239.255.255.250", "multicast"),
        ("ff02::1", "multicast"),
        ("0.1.2.3", "this_network"),
        ("255.255.255.255", "broadcast"),
        ("240.0.0.1", "reserved"),
        ("192.0.2.1", "documentation"),
        ("198.18.0.1", "benchmarking"),
        ("2001:db8::1", "documentation"),
        ("fec0::1", "site_local"),
        ("64:ff9b:1::1", "nat64_local"),
    ],
)
def test_non_public_address_is_refused_with_its_reason(address, reason):
    assert refusal(ip(address)) == reason


@pytest.mark.parametrize(
    ("address", "reason"),
    [
        ("::ffff:127.0.0.1", "loopback"),  # IPv4-mapped
        ("::ffff:10.1.2.3", "private"),
        ("::ffff:169.254.169.254", "metadata"),
        ("::127.0.0.1", "loopback"),  # IPv4-compatible (deprecated)
        ("::10.0.0.1", "private"),
        ("2002:7f00:1::", "loopback"),  # 6to4 of 127.0.0.1
        ("2002:a9fe:a9fe::1", "metadata"),  # 6to4 of 169.254.169.254
        ("64:ff9b::7f00:1", "loopback"),  # NAT64 of 127.0.0.1
        ("64:ff9b::a00:1", "private"),  # NAT64 of 10.0.0.1
        ("2001:0:4136:e378:8000:63bf:80ff:fffe", "loopback"),  # Teredo, client 127.0.0.1
    ],
)
def test_ipv6_carrying_an_ipv4_address_is_judged_as_that_address(address, reason):
    assert refusal(ip(address)) == reason


@pytest.mark.parametrize(
    "address",
    ["93.184.216.34", "8.8.8.8", "1.1.1.1", "2606:4700:4700::1111", "::ffff:8.8.8.8",
     "2002:808:808::1", "64:ff9b::808:808"],
)  # fmt: skip
def test_public_address_is_not_refused(address):
    assert refusal(ip(address)) is None


def test_embedded_ipv4_names_the_carried_address():
    assert embedded_ipv4(ip("::ffff:1.2.3.4")) == ip("1.2.3.4")
    assert embedded_ipv4(ip("2002:102:304::")) == ip("1.2.3.4")
    assert embedded_ipv4(ip("64:ff9b::102:304")) == ip("1.2.3.4")
    assert embedded_ipv4(ip("2606:4700::1")) is None
    assert embedded_ipv4(ip("1.2.3.4")) is None


def test_allowed_network_lifts_the_refusal_inside_it_only():
    allow = allowed_networks(["127.0.0.1/32"])
    assert refusal(ip("127.0.0.1"), allow=allow) is None
    assert refusal(ip("::ffff:127.0.0.1"), allow=allow) is None
    assert refusal(ip("127.0.0.2"), allow=allow) == "loopback"
    assert refusal(ip("::1"), allow=allow) == "loopback"
    assert refusal(ip("10.0.0.1"), allow=allow) == "private"


def test_allowed_networks_parses_cidrs_and_names_a_bad_one():
    assert allowed_networks(["127.0.0.1/32", "10.1.0.0/16", "fd00::/8", "192.168.0.7"]) == (
        ipaddress.ip_network("127.0.0.1/32"),
        ipaddress.ip_network("10.1.0.0/16"),
        ipaddress.ip_network("fd00::/8"),
        ipaddress.ip_network("192.168.0.7/32"),
    )
    assert allowed_networks([]) == ()
    with pytest.raises(ValueError, match="'10.0.0.0/33'"):
        allowed_networks(["127.0.0.1/32", "10.0.0.0/33"])


@pytest.mark.parametrize(
    ("host", "address"),
    [
        ("127.0.0.1", "127.0.0.1"),
        ("2130706433", "127.0.0.1"),  # one decimal integer
        ("0x7f000001", "127.0.0.1"),  # one hex integer
        ("0X7F000001", "127.0.0.1"),
        ("017700000001", "127.0.0.1"),  # one octal integer
        ("0177.0.0.1", "127.0.0.1"),  # octal part
        ("0x7f.0.0.1", "127.0.0.1"),  # hex part
        ("0x7f.1", "127.0.0.1"),  # two parts, the last fills three bytes
        ("127.1", "127.0.0.1"),
        ("127.0.1", "127.0.0.1"),  # three parts, the last fills two bytes
        ("0", "0.0.0.0"),
        ("169.254.43518", "169.254.169.254"),
        ("0251.0376.0251.0376", "169.254.169.254"),
        # Read as browsers (the WHATWG URL standard) do, where glibc would ask DNS: judged
        # as the address rather than left to whatever a resolver answers.
        ("127.0.0.1.", "127.0.0.1"),
        ("0x", "0.0.0.0"),
        ("[::1]", "::1"),
        ("::1", "::1"),
        ("[::ffff:127.0.0.1]", "::ffff:127.0.0.1"),
        ("[0:0:0:0:0:ffff:7f00:1]", "::ffff:127.0.0.1"),
    ],
)
def test_literal_host_reads_every_encoding_a_resolver_accepts(host, address):
    assert literal_host(host) == ip(address)


@pytest.mark.parametrize(
    "host", ["example.com", "localhost", "08.0.0.1", "1.2.3.4.5", "a.1", "xn--bcher-kva.de"]
)
def test_literal_host_leaves_names_to_the_resolver(host):
    assert literal_host(host) is None


@pytest.mark.parametrize(
    ("host", "message"),
    [
        ("[fe80::1%eth0]", "zone id"),
        ("fe80::1%25eth0", "zone id"),
        ("[example.com]", "not an IPv6"),
        ("[::1", "unbalanced"),
        ("4294967296", "out of range"),
        ("256.0.0.1", "out of range"),
        ("127.16777216", "out of range"),
    ],
)
def test_literal_host_refuses_what_no_url_should_carry(host, message):
    with pytest.raises(ValueError, match=message):
        literal_host(host)
