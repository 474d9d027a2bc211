//! Per-key IP allow-lists: CIDR networks (IPv4 and IPv6) a key may be used
//! from. An empty list leaves the key unrestricted.
//!
//! The source address is the TCP peer of the connection. Proxy headers such
//! as `X-Forwarded-For` are never trusted: behind a proxy every request comes
//! from the proxy's address, so allow-list the proxy or terminate at l1gate.
//! An IPv4-mapped IPv6 peer (`::ffff:10.1.2.3`) is matched as its IPv4
//! address, so dual-stack listeners behave like IPv4 ones; an IPv4-mapped
//! entry (`::ffff:10.0.0.0/104`) is stored as the IPv4 network it maps
//! (`10.0.0.0/8`), so it matches the peers it names.

use std::net::IpAddr;

use ipnet::IpNet;

/// A parsed allow-list.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AllowList {
    networks: Vec<IpNet>,
    restricted: bool,
}

/// Parses one allow-list entry: a CIDR network (`10.0.0.0/8`,
/// `2001:db8::/32`) or a bare address (a `/32` or `/128`). Host bits are
/// cleared: `10.1.2.3/8` is `10.0.0.0/8`. An IPv4-mapped IPv6 network of
/// prefix 96 or more is the IPv4 network it maps.
///
/// # Errors
/// A message quoting the entry when it is neither.
pub fn parse_network(text: &str) -> Result<IpNet, String> {
    let trimmed = text.trim();
    let net = if let Ok(net) = trimmed.parse::<IpNet>() {
        net.trunc()
    } else if let Ok(addr) = trimmed.parse::<IpAddr>() {
        IpNet::from(addr)
    } else {
        return Err(format!(
            "{} is not a CIDR network (expected e.g. 10.0.0.0/8, 203.0.113.7 or 2001:db8::/32)",
            common::quoted(text)
        ));
    };
    Ok(unmapped(net))
}

/// The IPv4 network an IPv4-mapped IPv6 network (`::ffff:a.b.c.d/96+n`)
/// names; any other network as it is. Peers are matched in IPv4 form, so a
/// mapped entry would otherwise never match.
fn unmapped(net: IpNet) -> IpNet {
    let IpNet::V6(v6) = net else {
        return net;
    };
    match (v6.addr().to_ipv4_mapped(), v6.prefix_len().checked_sub(96)) {
        (Some(v4), Some(prefix)) => ipnet::Ipv4Net::new(v4, prefix).map_or(net, IpNet::V4),
        _ => net,
    }
}

impl AllowList {
    /// Builds the list from stored entries. An entry that does not parse is
    /// dropped but still marks the key restricted, so a bad entry can never
    /// widen access (the keys file loader rejects such files anyway).
    pub fn from_entries(entries: &[String]) -> Self {
        Self {
            networks: entries
                .iter()
                .filter_map(|e| parse_network(e).ok())
                .collect(),
            restricted: !entries.is_empty(),
        }
    }

    /// Whether requests from `peer` may use the key. An unknown peer address
    /// passes only an unrestricted key.
    pub fn permits(&self, peer: Option<IpAddr>) -> bool {
        if !self.restricted {
            return true;
        }
        let Some(peer) = peer else {
            return false;
        };
        let peer = peer.to_canonical();
        self.networks.iter().any(|net| net.contains(&peer))
    }

    /// Whether the key is limited to some networks.
    pub fn is_restricted(&self) -> bool {
        self.restricted
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(entries: &[&str]) -> AllowList {
        AllowList::from_entries(&entries.iter().map(|e| (*e).to_owned()).collect::<Vec<_>>())
    }

    fn ip(text: &str) -> Option<IpAddr> {
        text.parse().ok()
    }

    #[test]
    fn an_empty_list_admits_every_source_even_an_unknown_one() {
        let open = list(&[]);
        assert!(open.permits(ip("203.0.113.9")));
        assert!(open.permits(ip("2001:db8::1")));
        assert!(open.permits(None));
        assert!(!open.is_restricted());
    }

    #[test]
    fn ipv4_and_ipv6_networks_match_their_members_only() {
        let restricted = list(&["10.0.0.0/8", "2001:db8::/32", "198.51.100.7"]);
        assert!(restricted.permits(ip("10.200.3.4")));
        assert!(!restricted.permits(ip("11.0.0.1")));
        assert!(restricted.permits(ip("2001:db8:ffff::1")));
        assert!(!restricted.permits(ip("2001:db9::1")));
        assert!(restricted.permits(ip("198.51.100.7")));
        assert!(!restricted.permits(ip("198.51.100.8")));
        assert!(!restricted.permits(None));
    }

    #[test]
    fn ipv4_mapped_ipv6_peers_match_ipv4_networks() {
        assert!(list(&["127.0.0.0/8"]).permits(ip("::ffff:127.0.0.1")));
        assert!(!list(&["10.0.0.0/8"]).permits(ip("::ffff:127.0.0.1")));
    }

    #[test]
    fn ipv4_mapped_entries_are_their_ipv4_networks() {
        assert_eq!(
            parse_network("::ffff:127.0.0.1/128").unwrap().to_string(),
            "127.0.0.1/32"
        );
        assert_eq!(
            parse_network("::ffff:10.0.0.0/104").unwrap().to_string(),
            "10.0.0.0/8"
        );
        assert_eq!(
            parse_network("::ffff:127.0.0.1").unwrap().to_string(),
            "127.0.0.1/32"
        );
        // Wider than the mapped range: an IPv6 network like any other.
        assert_eq!(parse_network("::/64").unwrap().to_string(), "::/64");
        let mapped = list(&["::ffff:127.0.0.1/128"]);
        assert!(mapped.permits(ip("127.0.0.1")));
        assert!(mapped.permits(ip("::ffff:127.0.0.1")));
        assert!(!mapped.permits(ip("127.0.0.2")));
    }

    #[test]
    fn entries_parse_to_networks_and_garbage_is_quoted() {
        assert_eq!(
            parse_network("10.1.2.3/8").unwrap().to_string(),
            "10.0.0.0/8"
        );
        assert_eq!(parse_network(" ::1 ").unwrap().to_string(), "::1/128");
        let err = parse_network("10.0.0/8").unwrap_err();
        assert!(err.contains("\"10.0.0/8\""), "{err}");
        assert!(parse_network("10.0.0.0/33").is_err());
    }

    #[test]
    fn a_bad_entry_never_widens_access() {
        let broken = list(&["not-a-network"]);
        assert!(broken.is_restricted());
        assert!(!broken.permits(ip("10.0.0.1")));
    }
}
