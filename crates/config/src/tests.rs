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
    for (bad, key) in [
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
    assert_eq!(default_acl().len(), 2);
}

#[test]
fn psk_from_hex_file_and_rejects_short() {
    let dir = std::env::temp_dir().join(format!("ctcp-config-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let good = dir.join("psk");
    std::fs::write(&good, format!("{}\n", "ab".repeat(32))).unwrap();
    assert_eq!(load_psk(Some(&good)).unwrap(), vec![0xab; 32]);
    let short = dir.join("short");
    std::fs::write(&short, "abcd").unwrap();
    assert!(load_psk(Some(&short)).is_err());
    assert!(load_psk(Some(&dir.join("missing")))
        .unwrap_err()
        .message
        .contains("cannot read"));
    std::fs::remove_dir_all(&dir).unwrap();
}
