"""Which IP addresses the direct fetcher (and the renderer) may reach; what is an IP literal.

The fetcher asks `refusal(ip)` of every address a host resolves to and of every IP literal
(parsed by `literal_host` in each encoding a resolver accepts) before it connects; the same
check runs on a URL before the rendering vendor is asked to load it, and on where it ended
(`fetcher.destination`). An address is refused unless it is public, or inside a network the
operator allowed (`TOLLGATE_WEB_ALLOW_NETS`, parsed by `allowed_networks`; a process setting,
never a tenant's: the test suite allows 127.0.0.1/32).
IPv6 forms that carry an IPv4 address (mapped, compatible, 6to4, NAT64, Teredo) are judged as
that IPv4 address: `::ffff:127.0.0.1` reaches loopback like `127.0.0.1` does.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Sequence

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network

_v4 = ipaddress.IPv4Network
_v6 = ipaddress.IPv6Network

# Checked in order: the first match names the reason. Metadata comes before link-local
# because the usual metadata address (169.254.169.254) is link-local too.
_REFUSED: tuple[tuple[str, tuple[Network, ...]], ...] = (
    ("unspecified", (_v4("0.0.0.0/32"), _v6("::/128"))),
    (
        "metadata",
        (
            _v4("169.254.169.254/32"),  # AWS, GCP, Azure, OpenStack, DigitalOcean
            _v4("169.254.170.2/32"),  # AWS ECS task metadata
            _v4("100.100.100.200/32"),  # Alibaba Cloud
            _v4("168.63.129.16/32"),  # Azure wire server (public space, still the host's)
            _v6("fd00:ec2::254/128"),  # AWS over IPv6
        ),
    ),
    ("loopback", (_v4("127.0.0.0/8"), _v6("::1/128"))),
    ("private", (_v4("10.0.0.0/8"), _v4("172.16.0.0/12"), _v4("192.168.0.0/16"), _v6("fc00::/7"))),
    ("link_local", (_v4("169.254.0.0/16"), _v6("fe80::/10"))),
    ("cgnat", (_v4("100.64.0.0/10"),)),
    ("multicast", (_v4("224.0.0.0/4"), _v6("ff00::/8"))),
    ("this_network", (_v4("0.0.0.0/8"),)),
    ("broadcast", (_v4("255.255.255.255/32"),)),
    ("site_local", (_v6("fec0::/10"),)),  # deprecated, still routed inside some networks
    ("nat64_local", (_v6("64:ff9b:1::/48"),)),  # local-use NAT64: translates to anything
)

_NAT64 = _v6("64:ff9b::/96")
_COMPAT = _v6("::/96")


def embedded_ipv4(ip: IPAddress) -> ipaddress.IPv4Address | None:
    """Return the IPv4 address an IPv6 address carries (mapped, compat, 6to4, NAT64, Teredo)."""
    if isinstance(ip, ipaddress.IPv4Address):
        return None
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip.sixtofour is not None:
        return ip.sixtofour
    if ip.teredo is not None:
        return ip.teredo[1]  # the client's address, the one the relay delivers to
    if ip in _NAT64 or (ip in _COMPAT and int(ip) > 1):
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return None


def refusal(ip: IPAddress, *, allow: Sequence[Network] = ()) -> str | None:
    """Return why `ip` may not be fetched ("loopback", "private", ...), or None if it may."""
    inner = embedded_ipv4(ip)
    if _inside(ip, allow) or (inner is not None and _inside(inner, allow)):
        return None
    if inner is not None:
        reason = refusal(inner)
        if reason is not None:
            return reason
    for reason, networks in _REFUSED:
        if _inside(ip, networks):
            return reason
    if inner is None and not ip.is_global:
        # Documentation, benchmarking, protocol-assignment and future-use ranges.
        return "reserved"
    return None


def _inside(ip: IPAddress, networks: Iterable[Network]) -> bool:
    return any(ip.version == net.version and ip in net for net in networks)


def allowed_networks(cidrs: Iterable[str]) -> tuple[Network, ...]:
    """Parse the allow-list setting: CIDR strings (or bare addresses) -> networks."""
    networks = []
    for cidr in cidrs:
        try:
            networks.append(ipaddress.ip_network(str(cidr).strip(), strict=False))
        except ValueError as exc:
            raise ValueError(f"TOLLGATE_WEB_ALLOW_NETS: {cidr!r} is not a network: {exc}") from None
    return tuple(networks)


_PART = re.compile(r"0[xX][0-9a-fA-F]*|0[0-7]*|[1-9][0-9]*")


def literal_host(host: str) -> IPAddress | None:
    """Return the address `host` names when it is an IP literal, else None (a name to resolve).

    Reads what inet_aton and getaddrinfo accept: dotted decimal, one to four parts each in
    decimal, octal (leading 0) or hex (0x), the last part filling the remaining bytes
    (`127.1`, `2130706433`, `0x7f.1`, `0177.0.0.1`), and IPv6 with or without brackets; like
    browsers, also a trailing dot and a bare `0x` (stricter than glibc, which would ask DNS).
    Raises ValueError for what no URL should carry: an IPv6 zone id, a bracketed text that is
    not IPv6, a numeric host out of range.
    """
    text = host.strip()
    if text.startswith("[") or text.endswith("]"):
        if not (text.startswith("[") and text.endswith("]")):
            raise ValueError(f"unbalanced brackets in host {host!r}")
        return _ipv6(text[1:-1], host)
    if ":" in text:
        return _ipv6(text, host)
    text = text.removesuffix(".")
    parts = text.split(".")
    if not 1 <= len(parts) <= 4 or not all(_PART.fullmatch(p) for p in parts):
        return None
    values = [_number(p) for p in parts]
    *head, last = values
    if any(v > 0xFF for v in head) or last >= 1 << (8 * (5 - len(parts))):
        raise ValueError(f"numeric host {host!r} is out of range")
    number = last
    for index, value in enumerate(head):
        number |= value << (8 * (3 - index))
    return ipaddress.IPv4Address(number)


def _number(part: str) -> int:
    if part[:2].lower() == "0x":
        return int(part[2:] or "0", 16)
    if part.startswith("0") and len(part) > 1:
        return int(part, 8)
    return int(part)


def _ipv6(text: str, host: str) -> ipaddress.IPv6Address:
    if "%" in text:
        raise ValueError(f"IPv6 zone id in host {host!r}")
    try:
        return ipaddress.IPv6Address(text)
    except ValueError:
        raise ValueError(f"host {host!r} is not an IPv6 address") from None
