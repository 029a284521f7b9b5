//! The reverse proxy's target access list: ordered allow/deny rules by CIDR and port range;
//! the first match wins.

use ipnet::IpNet;
use std::net::SocketAddr;
use std::ops::RangeInclusive;

/// One rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    /// Allow (true) or deny (false).
    pub allow: bool,
    /// Addresses the rule covers.
    pub net: IpNet,
    /// Ports the rule covers.
    pub ports: RangeInclusive<u16>,
}

/// Ordered rules plus the verdict when none matches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Acl {
    /// Rules in order.
    pub rules: Vec<Rule>,
    /// Verdict when no rule matches.
    pub default_allow: bool,
}

impl Acl {
    /// The ACL a validated reverse configuration asks for (its default is
    /// [`ctcp_config::default_acl`]: the reverse host's own and link-local addresses denied).
    pub fn from_config(cfg: &ctcp_config::ReverseConfig) -> Self {
        Acl {
            rules: cfg
                .acl
                .iter()
                .map(|r| Rule {
                    allow: r.allow,
                    net: r.net,
                    ports: r.ports.clone(),
                })
                .collect(),
            default_allow: cfg.acl_default_allow,
        }
    }

    /// No rules, everything allowed: for tests and demos whose targets are on loopback.
    pub fn allow_all() -> Self {
        Acl {
            rules: Vec::new(),
            default_allow: true,
        }
    }

    /// Whether `addr` may be connected to.
    pub fn allows(&self, addr: SocketAddr) -> bool {
        let ip = match addr.ip() {
            std::net::IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(addr.ip(), std::net::IpAddr::V4),
            ip => ip,
        };
        for r in &self.rules {
            if r.net.contains(&ip) && r.ports.contains(&addr.port()) {
                return r.allow;
            }
        }
        self.default_allow
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_blocks_loopback_link_local_and_metadata() {
        let acl = Acl::from_config(&ctcp_config::ReverseConfig::default());
        assert!(!acl.allows("169.254.169.254:80".parse().unwrap()));
        assert!(!acl.allows("[fe80::1]:22".parse().unwrap()));
        assert!(!acl.allows("[::ffff:169.254.169.254]:80".parse().unwrap()));
        assert!(!acl.allows("127.0.0.1:80".parse().unwrap()));
        assert!(!acl.allows("[::ffff:127.0.0.1]:80".parse().unwrap()));
        assert!(acl.allows("93.184.216.34:443".parse().unwrap()));
        assert!(Acl::allow_all().allows("127.0.0.1:80".parse().unwrap()));
    }

    #[test]
    fn first_match_wins() {
        let acl = Acl {
            rules: vec![
                Rule {
                    allow: true,
                    net: "10.0.0.5/32".parse().unwrap(),
                    ports: 22..=22,
                },
                Rule {
                    allow: false,
                    net: "10.0.0.0/8".parse().unwrap(),
                    ports: 0..=65535,
                },
            ],
            default_allow: true,
        };
        assert!(acl.allows("10.0.0.5:22".parse().unwrap()));
        assert!(!acl.allows("10.0.0.5:80".parse().unwrap()));
        assert!(acl.allows("192.0.2.1:80".parse().unwrap()));
    }
}
