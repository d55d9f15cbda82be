"""Which IP addresses the direct fetcher (and the renderer) may reach; what is an IP literal.

The fetcher asks `refusal(ip)` of every address a host resolves to and of every IP literal
(parsed by `literal_host` in each encoding a resolver accepts) before it connects; the same
check runs on every URL the rendering vendor is asked to load (each redirect hop is one) and
on a crawl's seed. An address is refused unless it is globally reachable, or inside a network
the operator allowed (`TOLLGATE_WEB_ALLOW_NETS`, parsed by `allowed_networks`; a process
setting, never a tenant's: the test suite allows 127.0.0.1/32).

What is globally reachable is written once, in `SPECIAL_RANGES`: every block of the IANA IPv4
and IPv6 Special-Purpose Address Registries (RFC 6890 / RFC 8190; rows as of the registries'
2025 updates) with the registry's own "Globally Reachable" value, plus the blocks a web
fetcher must refuse that those registries leave out (multicast, cloud metadata, site-local,
the IPv4-translated and IPv4-compatible forms, the rest of ::/8). The most specific block
containing an address decides (so 192.0.0.9/32 is judged apart from 192.0.0.0/24). IPv6
outside 2000::/3 (the only global unicast space, RFC 4291) and in no row is refused too.

IPv6 forms that carry an IPv4 address (mapped, translated, compatible, 6to4, NAT64, Teredo)
are judged as that IPv4 address first: `::ffff:127.0.0.1` and `::ffff:0:127.0.0.1` reach
loopback like `127.0.0.1` does. Mapped, 6to4, well-known NAT64 and Teredo carrying a public
IPv4 address are allowed (a socket, a relay or a translator delivers to that public
address); the translated and compatible forms are refused whatever they carry.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network

ALLOWED = "allowed"  # a SpecialRange.verdict: the block may be fetched
AS_IPV4 = "as_ipv4"  # a SpecialRange.verdict: judged as the IPv4 address it carries


@dataclass(frozen=True, slots=True)
class SpecialRange:
    """One special-purpose block and what the fetcher does with an address inside it."""

    network: Network
    name: str  # as the registry names it
    source: str  # where the block is defined (the registry row's RFC, or why it is here)
    globally_reachable: bool | None  # the registry's value; None where it says N/A or is silent
    verdict: str  # the refusal's reason ("loopback", ...), ALLOWED or AS_IPV4


def _row(cidr: str, name: str, source: str, reachable: bool | None, verdict: str) -> SpecialRange:
    return SpecialRange(ipaddress.ip_network(cidr), name, source, reachable, verdict)


# https://www.iana.org/assignments/iana-ipv4-special-registry
_IPV4_REGISTRY = (
    _row("0.0.0.0/8", '"This network"', "RFC 791", False, "this_network"),
    _row("0.0.0.0/32", '"This host on this network"', "RFC 1122", False, "unspecified"),
    _row("10.0.0.0/8", "Private-Use", "RFC 1918", False, "private"),
    _row("100.64.0.0/10", "Shared Address Space", "RFC 6598", False, "cgnat"),
    _row("127.0.0.0/8", "Loopback", "RFC 1122", False, "loopback"),
    _row("169.254.0.0/16", "Link Local", "RFC 3927", False, "link_local"),
    _row("172.16.0.0/12", "Private-Use", "RFC 1918", False, "private"),
    _row("192.0.0.0/24", "IETF Protocol Assignments", "RFC 6890", False, "reserved"),
    _row("192.0.0.0/29", "IPv4 Service Continuity Prefix", "RFC 7335", False, "reserved"),
    _row("192.0.0.8/32", "IPv4 dummy address", "RFC 7600", False, "reserved"),
    # Anycast answered by the nearest server, which is the operator's own CPE or NAT: the
    # registry calls it reachable, a fetcher must not.
    _row("192.0.0.9/32", "Port Control Protocol Anycast", "RFC 7723", True, "anycast_service"),
    _row("192.0.0.10/32", "Traversal Using Relays around NAT Anycast", "RFC 8155", True,
         "anycast_service"),
    _row("192.0.0.170/32", "NAT64/DNS64 Discovery", "RFC 8880", False, "reserved"),
    _row("192.0.0.171/32", "NAT64/DNS64 Discovery", "RFC 8880", False, "reserved"),
    _row("192.0.2.0/24", "Documentation (TEST-NET-1)", "RFC 5737", False, "documentation"),
    _row("192.31.196.0/24", "AS112-v4", "RFC 7535", True, ALLOWED),
    _row("192.52.193.0/24", "AMT", "RFC 7450", True, ALLOWED),
    _row("192.88.99.0/24", "Deprecated (6to4 Relay Anycast)", "RFC 7526", None, "reserved"),
    _row("192.168.0.0/16", "Private-Use", "RFC 1918", False, "private"),
    _row("192.175.48.0/24", "Direct Delegation AS112 Service", "RFC 7534", True, ALLOWED),
    _row("198.18.0.0/15", "Benchmarking", "RFC 2544", False, "benchmarking"),
    _row("198.51.100.0/24", "Documentation (TEST-NET-2)", "RFC 5737", False, "documentation"),
    _row("203.0.113.0/24", "Documentation (TEST-NET-3)", "RFC 5737", False, "documentation"),
    _row("240.0.0.0/4", "Reserved", "RFC 1112", False, "reserved"),
    _row("255.255.255.255/32", "Limited Broadcast", "RFC 919", False, "broadcast"),
)  # fmt: skip

# https://www.iana.org/assignments/iana-ipv6-special-registry
_IPV6_REGISTRY = (
    _row("::1/128", "Loopback Address", "RFC 4291", False, "loopback"),
    _row("::/128", "Unspecified Address", "RFC 4291", False, "unspecified"),
    _row("::ffff:0:0/96", "IPv4-mapped Address", "RFC 4291", False, AS_IPV4),
    _row("64:ff9b::/96", "IPv4-IPv6 Translat.", "RFC 6052", True, AS_IPV4),
    # Local-use NAT64: the operator's translator, which reaches whatever it is configured to.
    _row("64:ff9b:1::/48", "IPv4-IPv6 Translat.", "RFC 8215", False, "nat64_local"),
    _row("100::/64", "Discard-Only Address Block", "RFC 6666", False, "reserved"),
    _row("100:0:0:1::/64", "Dummy IPv6 Prefix", "RFC 9780", False, "reserved"),
    _row("2001::/23", "IETF Protocol Assignments", "RFC 2928", False, "reserved"),
    _row("2001::/32", "TEREDO", "RFC 4380", None, AS_IPV4),
    _row("2001:1::1/128", "Port Control Protocol Anycast", "RFC 7723", True, "anycast_service"),
    _row("2001:1::2/128", "Traversal Using Relays around NAT Anycast", "RFC 8155", True,
         "anycast_service"),
    _row("2001:1::3/128", "DNS-SD Service Registration Protocol Anycast", "RFC 9665", True,
         "anycast_service"),
    _row("2001:2::/48", "Benchmarking", "RFC 5180", False, "benchmarking"),
    _row("2001:3::/32", "AMT", "RFC 7450", True, ALLOWED),
    _row("2001:4:112::/48", "AS112-v6", "RFC 7535", True, ALLOWED),
    _row("2001:10::/28", "Deprecated (previously ORCHID)", "RFC 4843", None, "reserved"),
    _row("2001:20::/28", "ORCHIDv2", "RFC 7343", True, ALLOWED),
    _row("2001:30::/28", "Drone Remote ID Protocol Entity Tags (DETs) Prefix", "RFC 9374", True,
         ALLOWED),
    _row("2001:db8::/32", "Documentation", "RFC 3849", False, "documentation"),
    _row("2002::/16", "6to4", "RFC 3056", None, AS_IPV4),
    _row("2620:4f:8000::/48", "Direct Delegation AS112 Service", "RFC 7534", True, ALLOWED),
    _row("3fff::/20", "Documentation", "RFC 9637", False, "documentation"),
    _row("5f00::/16", "Segment Routing (SRv6) SIDs", "RFC 9602", False, "reserved"),
    _row("fc00::/7", "Unique-Local", "RFC 4193", False, "private"),
    _row("fe80::/10", "Link-Local Unicast", "RFC 4291", False, "link_local"),
)  # fmt: skip

# Not (or no longer) in the special-purpose registries, and no place for a fetch either.
_BEYOND_REGISTRIES = (
    _row("224.0.0.0/4", "Multicast", "RFC 5771 (IPv4 Multicast Address Space)", False,
         "multicast"),
    _row("ff00::/8", "Multicast", "RFC 4291 (IPv6 Address Space)", False, "multicast"),
    _row("fec0::/10", "Site-Local (deprecated)", "RFC 3879: still routed inside some networks",
         False, "site_local"),
    _row("::/8", "Reserved by IETF", "RFC 4291 (IPv6 Address Space)", False, "reserved"),
    _row("::/96", "IPv4-compatible (deprecated)", "RFC 4291 2.5.5.1", False, "ipv4_compatible"),
    _row("::ffff:0:0:0/96", "IPv4-translated", "RFC 2765 / RFC 6052: SIIT, no global route",
         False, "ipv4_translated"),
    # Cloud metadata services: the host's own, behind link-local or even public space.
    _row("169.254.169.254/32", "Instance metadata", "AWS, GCP, Azure, OpenStack, DigitalOcean",
         False, "metadata"),
    _row("169.254.170.2/32", "ECS task metadata", "AWS", False, "metadata"),
    _row("100.100.100.200/32", "Instance metadata", "Alibaba Cloud", False, "metadata"),
    _row("168.63.129.16/32", "Wire server", "Azure (public space, still the host's)", False,
         "metadata"),
    _row("fd00:ec2::254/128", "Instance metadata over IPv6", "AWS", False, "metadata"),
)  # fmt: skip

SPECIAL_RANGES: tuple[SpecialRange, ...] = _IPV4_REGISTRY + _IPV6_REGISTRY + _BEYOND_REGISTRIES

# The most specific block first: the first that contains an address decides.
_BY_SPECIFICITY = tuple(sorted(SPECIAL_RANGES, key=lambda r: -r.network.prefixlen))
_GLOBAL_UNICAST_V6 = ipaddress.IPv6Network("2000::/3")
_TRANSLATED = ipaddress.IPv6Network("::ffff:0:0:0/96")
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_COMPAT = ipaddress.IPv6Network("::/96")


def special_range(ip: IPAddress) -> SpecialRange | None:
    """Return the most specific special-purpose block containing `ip`, or None."""
    return next(
        (r for r in _BY_SPECIFICITY if r.network.version == ip.version and ip in r.network),
        None,
    )


def embedded_ipv4(ip: IPAddress) -> ipaddress.IPv4Address | None:
    """Return the IPv4 address an IPv6 address carries (mapped, translated, compatible, 6to4,
    NAT64, Teredo)."""
    if isinstance(ip, ipaddress.IPv4Address):
        return None
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip.sixtofour is not None:
        return ip.sixtofour
    if ip.teredo is not None:
        return ip.teredo[1]  # the client's address, the one the relay delivers to
    if ip in _TRANSLATED or ip in _NAT64 or (ip in _COMPAT and int(ip) > 1):
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
            return reason  # named by what it carries: `::ffff:0:127.0.0.1` is loopback
    block = special_range(ip)
    if block is None:
        if ip.version == 6 and ip not in _GLOBAL_UNICAST_V6:
            return "reserved"  # unassigned IPv6 space: nothing global lives there
        return None
    if block.verdict in (ALLOWED, AS_IPV4):
        return None
    return block.verdict


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


class HostRefused(ValueError):
    """A host the control plane must not call (the message says why)."""


def checked_address(url: str, *, allow: Sequence[Network] = ()) -> IPAddress:
    """Resolve `url`'s host once and check every address it has; return the one to connect
    to. The one check for URLs a tenant gives (SSO providers, alert webhooks): raises
    HostRefused when the host does not resolve, or is (or resolves to) an address that is
    not globally reachable and not in `allow`. A caller that connects to the address
    returned, not to the name, cannot be sent elsewhere by a second lookup (DNS rebinding).
    Resolves with the system's resolver (blocking): the control plane's, never the request
    path's."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    literal = literal_host(host)
    try:
        ips = (
            [literal]
            if literal is not None
            else [
                ipaddress.ip_address(str(info[4][0]).split("%")[0])
                for info in socket.getaddrinfo(
                    host,
                    parts.port or (80 if parts.scheme == "http" else 443),
                    type=socket.SOCK_STREAM,
                )
            ]
        )
    except (OSError, ValueError):
        raise HostRefused(f"host {host} does not resolve") from None
    if not ips:
        raise HostRefused(f"host {host} does not resolve")
    for ip in ips:
        if why := refusal(ip, allow=allow):
            raise HostRefused(f"host {host} is a {why} address, which Tollgate does not call")
    return ips[0]
