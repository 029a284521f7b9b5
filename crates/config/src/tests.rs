use super::*;

#[test]
fn empty_file_is_the_embedded_defaults() {
    assert_eq!(
        ForwardConfig::from_toml_str("", "f").unwrap(),
        ForwardConfig::default()
    );
    assert_eq!(
        ReverseConfig::from_toml_str("", "r").unwrap(),
        ReverseConfig::default()
    );
}

#[test]
fn shipped_example_files_parse() {
    let f = ForwardConfig::load(Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../configs/forward.toml"
    )))
    .unwrap();
    assert_eq!(f.peer.as_deref(), Some("reverse.example.net:7000"));
    assert_eq!(
        ForwardConfig {
            peer: None,
            psk_file: None,
            ..f
        },
        ForwardConfig::default()
    );
    let r = ReverseConfig::load(Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../configs/reverse.toml"
    )))
    .unwrap();
    assert_eq!(
        ReverseConfig {
            psk_file: None,
            ..r
        },
        ReverseConfig::default()
    );
}

#[test]
fn errors_name_file_line_and_key() {
    let text = "listen = \"127.0.0.1:1080\"\n\n[transport]\nwindow = 3\n";
    let e = ForwardConfig::from_toml_str(text, "configs/forward.toml").unwrap_err();
    assert_eq!(
        e.to_string(),
        "configs/forward.toml:4: key 'transport.window': must be between 16 and 65536 (got 3)"
    );
    let e = ForwardConfig::from_toml_str("[transport]\nwindwo = 5\n", "f.toml").unwrap_err();
    assert_eq!(e.line, Some(2));
    assert_eq!(e.key.as_deref(), Some("windwo"));
    let e = ReverseConfig::from_toml_str(
        "[[acl]]\naction = \"maybe\"\nnet = \"10.0.0.0/8\"\n",
        "r.toml",
    )
    .unwrap_err();
    assert_eq!(e.line, Some(2));
    assert_eq!(e.key.as_deref(), Some("acl[0].action"));
    let e = ForwardConfig::from_toml_str("listen = \"nope\"\n", "f.toml").unwrap_err();
    assert_eq!(e.line, Some(1));
}

#[test]
fn durations_sizes_rates() {
    let f = ForwardConfig::from_toml_str("open_timeout = \"1m 30s\"\n[transport]\nmax_rate = \"12.5mbit\"\nidle_timeout = \"500ms\"\nkeepalive = \"100ms\"\n", "f").unwrap_err();
    assert_eq!(f.key.as_deref(), Some("transport.idle_timeout"));
    let f = ForwardConfig::from_toml_str(
        "open_timeout = \"1m 30s\"\n[transport]\nmax_rate = \"12.5mbit\"\n",
        "f",
    )
    .unwrap();
    assert_eq!(f.open_timeout, Duration::from_secs(90));
    assert_eq!(f.transport.max_rate_bps, Some(12_500_000));
    assert!(!f.fast_open, "strict SOCKS replies unless asked");
    let f = ForwardConfig::from_toml_str(
        "fast_open = true
",
        "f",
    )
    .unwrap();
    assert!(f.fast_open);
    let e = ForwardConfig::from_toml_str("fast_open = \"yes\"\n", "f").unwrap_err();
    assert_eq!(e.line, Some(1));
    // Ordinary values and the accepted bounds.
    for (percent, train) in [(90u16, 0u8), (400, 64)] {
        let text =
            format!("[transport]\nproactive_repair = {percent}\nhandshake_train = {train}\n");
        let f = ForwardConfig::from_toml_str(&text, "f").unwrap();
        assert_eq!(f.transport.proactive_repair_percent, percent);
        assert_eq!(f.transport.handshake_train, train);
    }
    let d = ForwardConfig::from_toml_str("", "f").unwrap();
    assert_eq!(
        d.transport.proactive_repair_percent, 0,
        "reactive by default"
    );
    assert_eq!(d.transport.handshake_train, 16);
    assert_eq!(d.transport.repair_priority, crate::RepairPriority::Latency);
    let f = ForwardConfig::from_toml_str("[transport]\nrepair_priority = \"bandwidth\"\n", "f")
        .unwrap();
    assert_eq!(
        f.transport.repair_priority,
        crate::RepairPriority::Bandwidth
    );
    for (bad, key) in [
        ("repair_priority = \"cheap\"", "transport.repair_priority"),
        ("proactive_repair = 401", "transport.proactive_repair"),
        ("handshake_train = 65", "transport.handshake_train"),
    ] {
        let e = ForwardConfig::from_toml_str(&format!("[transport]\n{bad}\n"), "f").unwrap_err();
        assert_eq!(e.key.as_deref(), Some(key), "{bad}");
    }
    assert_eq!(parse_size("64KiB"), Ok(65536));
    assert_eq!(parse_size("16MB"), Ok(16_000_000));
    assert_eq!(parse_rate("1Gbit"), Ok(1_000_000_000));
    assert!(parse_rate("10 furlongs").is_err());
}

#[test]
fn acl_rules_parse_in_order() {
    let r = ReverseConfig::from_toml_str(
        "acl_default = \"deny\"\n[[acl]]\naction = \"allow\"\nnet = \"10.0.0.5\"\nports = \"22\"\n[[acl]]\naction = \"deny\"\nnet = \"10.0.0.0/8\"\nports = \"1-1024\"\n",
        "r",
    )
    .unwrap();
    assert!(!r.acl_default_allow);
    assert_eq!(r.acl.len(), 2);
    assert!(r.acl[0].allow && r.acl[0].ports == (22..=22));
    assert_eq!(r.acl[1].ports, 1..=1024);
    assert!(default_acl().iter().all(|a| !a.allow));
    assert_eq!(default_acl().len(), DEFAULT_DENIED.len());
}

fn temp_dir(tag: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("ctcp-config-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn psk_from_hex_file_and_rejects_short() {
    let dir = temp_dir("psk");
    let good = dir.join("psk");
    std::fs::write(&good, format!("{}\n", "ab".repeat(32))).unwrap();
    assert_eq!(load_psk(Some(&good)).unwrap(), [0xab; 32]);
    let short = dir.join("short");
    std::fs::write(&short, "abcd").unwrap();
    assert!(load_psk(Some(&short)).is_err());
    assert!(load_psk(Some(&dir.join("missing")))
        .unwrap_err()
        .message
        .contains("cannot read"));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn keys_must_be_exactly_64_hex_digits_and_errors_say_how_to_make_one() {
    let hex = "0123456789abcdefABCDEF".repeat(3)[..64].to_owned();
    for ok in [hex.clone(), format!("{hex}\n"), format!("  {hex} \r\n")] {
        assert!(parse_key(ok.as_bytes()).is_ok(), "{ok:?}");
    }
    let spaced = hex
        .as_bytes()
        .chunks(2)
        .map(|c| std::str::from_utf8(c).unwrap())
        .collect::<Vec<_>>()
        .join(" ");
    let mut raw = [0u8; 32];
    for (i, b) in raw.iter_mut().enumerate() {
        *b = (i as u8).wrapping_mul(97).wrapping_add(200);
    }
    let typo = format!("{}g{}", &hex[..10], &hex[11..]);
    let long = format!("{hex}00");
    let cases: [(&[u8], &str); 6] = [
        (spaced.as_bytes(), "whitespace inside"),
        (&raw, "binary"),
        (typo.as_bytes(), "'g' (character 11) is not a hex digit"),
        (&hex.as_bytes()[..62], "62 hex digits"),
        (long.as_bytes(), "66 hex digits"),
        (b"", "0 hex digits"),
    ];
    let dir = temp_dir("strict");
    for (i, (text, why)) in cases.iter().enumerate() {
        let e = parse_key(text).unwrap_err();
        assert!(e.contains(why), "{why}: {e}");
        let f = dir.join(format!("k{i}"));
        std::fs::write(&f, text).unwrap();
        let e = load_psk(Some(&f)).unwrap_err().to_string();
        assert!(e.contains(why) && e.contains("keygen --out FILE"), "{e}");
        assert!(e.contains("head -c32 /dev/urandom"), "{e}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[cfg(unix)]
#[test]
fn group_or_world_readable_key_files_are_flagged() {
    use std::os::unix::fs::PermissionsExt;
    let dir = temp_dir("mode");
    let f = dir.join("psk");
    std::fs::write(&f, "ab".repeat(32)).unwrap();
    for (mode, flagged) in [
        (0o600, None),
        (0o400, None),
        (0o640, Some("its group")),
        (0o644, Some("everyone")),
    ] {
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(mode)).unwrap();
        let w = key_file_warning(&f);
        match flagged {
            None => assert_eq!(w, None, "{mode:o}"),
            Some(who) => {
                let w = w.unwrap();
                assert!(w.contains(who) && w.contains("chmod 600"), "{w}");
            }
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn log_levels_are_checked() {
    for ok in [
        "info",
        "DEBUG",
        "off",
        "warn,ctcp_runtime=debug",
        "ctcp_proto[session]=trace",
    ] {
        let text = format!("[log]\nlevel = {ok:?}\n");
        assert_eq!(
            ForwardConfig::from_toml_str(&text, "f").unwrap().log.level,
            ok
        );
    }
    for bad in ["verbose", "", "info,chatty", "ctcp_runtime=loud", "=info"] {
        let text = format!("[log]\nlevel = {bad:?}\n");
        let e = ReverseConfig::from_toml_str(&text, "r.toml").unwrap_err();
        assert_eq!(e.key.as_deref(), Some("log.level"), "{bad}");
        assert_eq!(e.line, Some(2));
        assert!(e.message.contains("error, warn, info, debug, trace"), "{e}");
    }
}

#[test]
fn peer_needs_a_host_and_a_port() {
    for ok in [
        "reverse.example.net:7000",
        "192.0.2.1:7000",
        "[2001:db8::1]:7000",
    ] {
        let f = ForwardConfig::from_toml_str(&format!("peer = {ok:?}\n"), "f").unwrap();
        assert_eq!(f.peer.as_deref(), Some(ok));
    }
    for bad in [
        "127.0.0.1",
        "::1",
        "2001:db8::1:7000",
        ":7000",
        "host:0",
        "host:70000",
        "host:",
    ] {
        let e = ForwardConfig::from_toml_str(&format!("peer = {bad:?}\n"), "f").unwrap_err();
        assert_eq!(e.key.as_deref(), Some("peer"), "{bad}");
        assert!(
            e.message.contains("HOST:PORT") || e.message.contains("port"),
            "{e}"
        );
    }
    assert!(parse_peer("127.0.0.1").unwrap_err().contains("no port"));
}

#[test]
fn wrong_types_name_their_key() {
    let cases = [
        ("[transport]\nwindow = \"big\"\n", "transport.window", 2),
        ("# c\nmax_sessions = \"many\"\n", "max_sessions", 2),
        ("[log]\njson = 1\n", "json", 2),
        (
            "[[acl]]\naction = \"deny\"\nnet = \"10.0.0.0/8\"\n[[acl]]\naction = \"allow\"\nnet = 5\n",
            "acl[1].net",
            6,
        ),
        ("[transport]\nsymbol_size = -1\n", "transport.symbol_size", 2),
    ];
    for (text, key, line) in cases {
        let e = ReverseConfig::from_toml_str(text, "r.toml").unwrap_err();
        assert_eq!(e.key.as_deref(), Some(key), "{text}: {e}");
        assert_eq!(e.line, Some(line), "{text}");
        assert!(e.to_string().contains(&format!("key '{key}'")), "{e}");
    }
}

#[test]
fn bad_durations_list_the_units() {
    for (text, key) in [
        (
            "[transport]\nidle_timeout = \"30\"\n",
            "transport.idle_timeout",
        ),
        ("[transport]\ninitial_rtt = 100\n", "transport.initial_rtt"),
        ("open_timeout = \"5 parsecs\"\n", "open_timeout"),
        ("drain_timeout = \"soon\"\n", "drain_timeout"),
    ] {
        let e = ForwardConfig::from_toml_str(text, "f").unwrap_err();
        assert_eq!(e.key.as_deref(), Some(key), "{text}");
        assert!(e.message.contains(DURATION_UNITS), "{text}: {e}");
    }
    assert!(parse_duration("10 parsecs")
        .unwrap_err()
        .contains(DURATION_UNITS));
    assert_eq!(parse_duration("1m 30s"), Ok(Duration::from_secs(90)));
    let e = ForwardConfig::from_toml_str("[transport]\ninitial_rtt = \"0s\"\n", "f").unwrap_err();
    assert_eq!(e.key.as_deref(), Some("transport.initial_rtt"));
}

#[test]
fn default_acl_denies_the_reverse_hosts_loopback_unless_overridden() {
    let denied = |acl: &[AclRule], ip: &str| {
        let ip: std::net::IpAddr = ip.parse().unwrap();
        acl.iter()
            .find(|r| r.net.contains(&ip))
            .is_some_and(|r| !r.allow)
    };
    let d = ReverseConfig::default();
    for ip in [
        "127.0.0.1",
        "127.1.2.3",
        "::1",
        "0.0.0.0",
        "::",
        "169.254.169.254",
        "fe80::1",
    ] {
        assert!(denied(&d.acl, ip), "{ip}");
    }
    assert!(!denied(&d.acl, "192.0.2.1") && d.acl_default_allow);
    // A file's own rules replace the default list.
    let r = ReverseConfig::from_toml_str("[[acl]]\naction = \"deny\"\nnet = \"10.0.0.0/8\"\n", "r")
        .unwrap();
    assert!(!denied(&r.acl, "127.0.0.1"));
    assert_eq!(
        parse_net_ports("127.0.0.1,22"),
        Ok(("127.0.0.1/32".parse().unwrap(), 22..=22))
    );
    assert_eq!(
        parse_net_ports("::1/128"),
        Ok(("::1/128".parse().unwrap(), 0..=u16::MAX))
    );
    assert!(parse_net_ports("10.0.0.0/8,99999").is_err());
}

#[test]
fn transport_defaults_are_the_protocol_crates() {
    // Written once, in ctcp-proto: the settings take them and give them back unchanged.
    let proto = ctcp_proto::TransportConfig::default();
    assert_eq!(
        TransportSettings::default(),
        TransportSettings::from_transport(&proto)
    );
    assert_eq!(TransportSettings::default().transport_config(), proto);
    let r = ReverseConfig::default();
    assert_eq!(r.max_sessions, EndpointConfig::DEFAULT_MAX_SESSIONS);
    assert_eq!(r.handshake_rate, EndpointConfig::DEFAULT_HANDSHAKE_RATE);
}

#[test]
fn settings_turn_into_the_transport_they_name() {
    let t = TransportSettings {
        symbol_size: 1280,
        window: 4096,
        max_rate_bps: Some(50_000_000),
        idle_timeout: Duration::from_secs(60),
        keepalive: Duration::from_secs(7),
        initial_rtt: Duration::from_millis(600),
        max_streams: 100,
        session_send_buffer: 1 << 20,
        proactive_repair_percent: 90,
        repair_priority: crate::RepairPriority::Bandwidth,
        handshake_train: 0,
        datagrams: false,
        datagram_deadline: Duration::from_millis(120),
        datagram_queue: 512,
    };
    let c = t.transport_config();
    assert_eq!(c.symbol_size, 1280);
    assert_eq!(c.max_rate_bps, Some(50_000_000));
    assert_eq!(c.session_send_buffer, 1 << 20);
    assert!((c.proactive_repair - 0.9).abs() < 1e-12);
    assert_eq!(c.repair_priority, crate::RepairPriority::Bandwidth);
    assert_eq!(TransportSettings::from_transport(&c), t);
}

/// The keys a section accepts, from serde's answer to an unknown one ("unknown field `x`,
/// expected one of `a`, `b`").
fn accepted_keys(parse: impl Fn(&str) -> Result<(), ConfigError>, section: &str) -> Vec<String> {
    let text = if section.is_empty() {
        "no_such_key = 1\n".to_owned()
    } else {
        format!("[{section}]\nno_such_key = 1\n")
    };
    let e = parse(&text).unwrap_err();
    let expected = e.message.split("expected").nth(1).unwrap_or("").to_owned();
    let keys: Vec<String> = expected
        .split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect();
    assert!(!keys.is_empty(), "{}", e.message);
    keys
}

#[test]
fn reference_files_show_every_key() {
    // Every key appears in the commented reference file, set or commented out (the test
    // above checks that the ones set are at their defaults).
    let check = |file: &str, parse: &dyn Fn(&str) -> Result<(), ConfigError>| {
        let path = format!("{}/../../configs/{file}", env!("CARGO_MANIFEST_DIR"));
        let text = std::fs::read_to_string(&path).unwrap();
        for section in ["", "log", "transport", "relay"] {
            for key in accepted_keys(parse, section) {
                let shown = text.lines().any(|l| {
                    let l = l.trim_start_matches(['#', ' ', '[']);
                    l.starts_with(&format!("{key} =")) || l.starts_with(&format!("{key}]"))
                });
                assert!(shown, "{file}: key {section}.{key} is not shown");
            }
        }
    };
    check("forward.toml", &|t| {
        ForwardConfig::from_toml_str(t, "f").map(drop)
    });
    check("reverse.toml", &|t| {
        ReverseConfig::from_toml_str(t, "r").map(drop)
    });
}

#[test]
fn relay_table_parses_and_names_bad_keys() {
    let r = ReverseConfig::from_toml_str(
        "[relay]\nnext_hop = \"gw2.example.net:7000\"\nnext_psk_file = \"/etc/ctcp/next.psk\"\nbuffer = \"8MiB\"\nopen_timeout = \"5s\"\n",
        "r",
    )
    .unwrap();
    assert_eq!(r.relay.next_hop.as_deref(), Some("gw2.example.net:7000"));
    assert_eq!(
        r.relay.next_psk_file.as_deref(),
        Some(Path::new("/etc/ctcp/next.psk"))
    );
    assert_eq!(r.relay.buffer, 8 << 20);
    assert_eq!(r.relay.open_timeout, Duration::from_secs(5));
    assert_eq!(ReverseConfig::default().relay, RelayConfig::default());
    assert_eq!(RelayConfig::default().next_hop, None);
    for (bad, key) in [
        ("next_hop = \"nowhere\"", "relay.next_hop"),
        ("next_hop = \"gw:7000\"\nbuffer = \"1KiB\"", "relay.buffer"),
        ("next_hop = \"gw:7000\"\nbuffer = \"lots\"", "relay.buffer"),
        (
            "next_hop = \"gw:7000\"\nopen_timeout = \"0s\"",
            "relay.open_timeout",
        ),
        ("next_psk_file = \"/k\"", "relay.next_psk_file"),
        ("next_hpo = \"gw:7000\"", "next_hpo"),
    ] {
        let text = format!("[relay]\n{bad}\n");
        let e = ReverseConfig::from_toml_str(&text, "r.toml").unwrap_err();
        assert_eq!(e.key.as_deref(), Some(key), "{bad}: {e}");
        assert!(e.line.is_some(), "{bad}: {e}");
    }
}

#[test]
fn transparent_listener_is_off_by_default_and_checked() {
    let d = ForwardConfig::default();
    assert_eq!(d.transparent_listen, None);
    assert_eq!(d.transparent_mode, TransparentMode::Redirect);
    let f = ForwardConfig::from_toml_str(
        "transparent_listen = \"[::]:12345\"\ntransparent_mode = \"tproxy\"\n",
        "f",
    )
    .unwrap();
    assert_eq!(f.transparent_listen, Some("[::]:12345".parse().unwrap()));
    assert_eq!(f.transparent_mode, TransparentMode::Tproxy);
    let e =
        ForwardConfig::from_toml_str("# c\ntransparent_mode = \"nat\"\n", "f.toml").unwrap_err();
    assert_eq!(e.key.as_deref(), Some("transparent_mode"));
    assert_eq!(e.line, Some(2));
    assert!(e.message.contains("\"redirect\" or \"tproxy\""), "{e}");
    for (text, why) in [
        (
            "listen = \"0.0.0.0:1080\"\ntransparent_listen = \"10.0.0.1:1080\"\n",
            "SOCKS listener",
        ),
        (
            "metrics_listen = \"127.0.0.1:9100\"\ntransparent_listen = \"0.0.0.0:9100\"\n",
            "metrics endpoint",
        ),
        ("transparent_listen = \"0.0.0.0:0\"\n", "fixed port"),
    ] {
        let e = ForwardConfig::from_toml_str(text, "f.toml").unwrap_err();
        assert_eq!(e.key.as_deref(), Some("transparent_listen"), "{text}");
        assert_eq!(e.line, Some(text.lines().count()), "{text}");
        assert!(e.message.contains(why), "{text}: {e}");
    }
    assert_eq!(
        parse_transparent_mode("redirect"),
        Ok(TransparentMode::Redirect)
    );
    assert_eq!(TransparentMode::Tproxy.to_string(), "tproxy");
}

#[test]
fn peer_may_list_several_gateways() {
    assert_eq!(
        parse_peer("gw1.example.net:7000, [2001:db8::2]:7000").unwrap(),
        "gw1.example.net:7000,[2001:db8::2]:7000"
    );
    let f = ForwardConfig::from_toml_str("peer = \"a:1,b:2\"\n", "f").unwrap();
    assert_eq!(f.peer.as_deref(), Some("a:1,b:2"));
    assert!(parse_peer("a:1,").unwrap_err().contains("empty entry"));
    assert!(parse_peer("a:1,b").unwrap_err().contains("no port"));
}

#[test]
fn datagram_and_udp_flow_settings_parse_and_are_checked() {
    let d = ForwardConfig::default();
    assert!(d.transport.datagrams);
    assert_eq!(d.transparent_udp_listen, None);
    assert_eq!(d.udp, UdpFlowConfig::default());
    let t = TransportConfig::default();
    assert_eq!(d.transport.datagram_deadline, t.datagram_deadline);
    assert_eq!(d.transport.datagram_queue, t.datagram_queue);
    let r = ReverseConfig::from_toml_str(
        "udp_max_flows = 10\nudp_idle_timeout = \"5s\"\n[transport]\ndatagrams = false\ndatagram_deadline = \"80ms\"\ndatagram_queue = 64\n",
        "r",
    )
    .unwrap();
    assert_eq!(r.udp.max_flows, 10);
    assert_eq!(r.udp.idle_timeout, Duration::from_secs(5));
    let tc = r.transport.transport_config();
    assert!(!tc.datagrams);
    assert_eq!(tc.datagram_deadline, Duration::from_millis(80));
    assert_eq!(tc.datagram_queue, 64);
    for (text, key) in [
        ("udp_max_flows = 0\n", "udp_max_flows"),
        ("udp_idle_timeout = \"100ms\"\n", "udp_idle_timeout"),
        (
            "[transport]\ndatagram_deadline = \"0s\"\n",
            "transport.datagram_deadline",
        ),
        (
            "[transport]\ndatagram_queue = 1\n",
            "transport.datagram_queue",
        ),
    ] {
        let e = ReverseConfig::from_toml_str(text, "r.toml").unwrap_err();
        assert_eq!(e.key.as_deref(), Some(key), "{text}");
        assert_eq!(e.line, Some(text.lines().count()), "{text}: {e}");
        let e = ForwardConfig::from_toml_str(text, "f.toml").unwrap_err();
        assert_eq!(e.key.as_deref(), Some(key), "{text}");
    }
    let f = ForwardConfig::from_toml_str(
        "transparent_mode = \"tproxy\"\ntransparent_udp_listen = \"[::]:12345\"\n",
        "f",
    )
    .unwrap();
    assert_eq!(
        f.transparent_udp_listen,
        Some("[::]:12345".parse().unwrap())
    );
    for (text, why) in [
        ("transparent_udp_listen = \"[::]:12345\"\n", "tproxy"),
        (
            "transparent_mode = \"tproxy\"\ntransparent_udp_listen = \"[::]:12345\"\n[transport]\ndatagrams = false\n",
            "datagrams",
        ),
        (
            "transparent_mode = \"tproxy\"\ntransparent_udp_listen = \"[::]:0\"\n",
            "fixed port",
        ),
    ] {
        let e = ForwardConfig::from_toml_str(text, "f.toml").unwrap_err();
        assert_eq!(e.key.as_deref(), Some("transparent_udp_listen"), "{text}");
        assert!(e.message.contains(why), "{text}: {e}");
    }
}

#[test]
fn forward_paths_parse_and_validate() {
    let d = ForwardConfig::default();
    assert!(d.paths.is_empty(), "single path unless configured");
    assert_eq!(d.policy, ctcp_proto::PathPolicy::Aggregate);
    let f = ForwardConfig::from_toml_str(
        "policy = \"failover\"\npaths = [{ bind = \"10.77.0.1\" }, { bind = \"wwan0\" }]\n",
        "f",
    )
    .unwrap();
    assert_eq!(
        f.paths,
        vec![
            PathBind::Address("10.77.0.1".parse().unwrap()),
            PathBind::Device("wwan0".into())
        ]
    );
    assert_eq!(f.policy, ctcp_proto::PathPolicy::Failover);
    for (text, key) in [
        ("policy = \"fastest\"\n", "policy"),
        ("paths = [{ bind = \"\" }]\n", "paths[0].bind"),
        ("paths = [{ bind = \"a/b\" }]\n", "paths[0].bind"),
        (
            "paths = [{ bind = \"averyveryverylongname\" }]\n",
            "paths[0].bind",
        ),
        (
            "paths = [{ bind = \"eth0\" }, { bind = \"eth0\" }]\n",
            "paths[1].bind",
        ),
    ] {
        let e = ForwardConfig::from_toml_str(text, "f").unwrap_err();
        assert_eq!(e.key.as_deref(), Some(key), "{text}: {e}");
    }
    let nine = (0..9)
        .map(|i| format!("{{ bind = \"10.0.0.{i}\" }}"))
        .collect::<Vec<_>>()
        .join(", ");
    let e = ForwardConfig::from_toml_str(&format!("paths = [{nine}]\n"), "f").unwrap_err();
    assert_eq!(e.key.as_deref(), Some("paths"));
}

#[test]
fn reverse_policy_parses() {
    assert_eq!(
        ReverseConfig::default().policy,
        ctcp_proto::PathPolicy::Aggregate
    );
    let r = ReverseConfig::from_toml_str("policy = \"redundant\"\n", "r").unwrap();
    assert_eq!(r.policy, ctcp_proto::PathPolicy::Redundant);
    let e = ReverseConfig::from_toml_str("policy = \"both\"\n", "r").unwrap_err();
    assert_eq!(e.key.as_deref(), Some("policy"));
}
