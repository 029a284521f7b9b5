//! Gateway mode in real network namespaces: a LAN client with no proxy settings runs
//! `curl` (an HTTP download, checked by SHA-256) and `rsync` (a tree of files, checked by
//! `diff -r`) to a server beyond the tunnel, over IPv4 and IPv6, through ctcp-forward's
//! transparent listener in `redirect` mode and in `tproxy` mode, with the shipped
//! rulesets (`configs/gateway-redirect.nft`, `configs/gateway-tproxy.nft` and
//! `gateway-tproxy.sh`) loaded as they are, only their `define` lines set for the test.
//! UDP through the transparent UDP listener (tproxy): `dig` on the client asks a real DNS
//! server (dnsmasq, in R) over IPv4 and IPv6.
//!
//! ```text
//!  client ns (C)            forward ns (F)                    reverse ns (R)
//!  10.200.1.2  ── veth ──  10.200.1.1  ctcp-forward           ctcp-reverse 10.200.2.2
//!  fd00:c7::2              fd00:c7::1  10.200.2.1 ── veth ──  servers on lo: 10.200.9.1,
//!  default via F           (no route to the servers)          fd00:c9::1 (HTTP, rsyncd)
//! ```
//!
//! F has no route to the servers and does not forward, so every byte the client gets
//! came through the tunnel. The loop guard is checked too: a connection to the
//! listener's own address and one to the reverse peer are refused, never tunnelled.
//!
//! Needs root, `ip`, `nft`, `curl`, `rsync` and `diff` (and `dnsmasq`, `dig` for UDP);
//! without them each test prints why and passes. The namespaces are named per process and removed when a test ends.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test] fns

mod netns;

use netns::{fill, have, in_ns, ip, must, run, sha256, wait_for_log, wait_until, Lab};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

const TRANSPARENT_PORT: u16 = 12345;
const HTTP_PORT: u16 = 8080;
const RSYNC_PORT: u16 = 8730;
const REVERSE: &str = "10.200.2.2:7000";
const SERVER_V4: &str = "10.200.9.1";
const SERVER_V6: &str = "fd00:c9::1";
const FILE_SIZE: usize = 6 << 20;
const DNS_A: &str = "10.77.0.1";
const DNS_AAAA: &str = "fd00:77::1";
const DNS_TXT: &str = "coded-datagrams";

/// Why the tests cannot run here, if so.
fn skip_reason() -> Option<String> {
    netns::skip_reason(&["ip", "nft", "curl", "rsync", "diff", "ss"])
}

/// The three namespaces (`c`, `f`, `r`), veths, addresses and routes as drawn in the
/// module's diagram.
fn gateway_lab(tag: &str) -> Lab {
    let lab = Lab::new("gw", tag, &["c", "f", "r"]);
    lab.veth("c", "c0", "f", "f0");
    lab.veth("f", "f1", "r", "r1");
    for (n, dev, addr) in [
        ("c", "c0", "10.200.1.2/24"),
        ("c", "c0", "fd00:c7::2/64"),
        ("f", "f0", "10.200.1.1/24"),
        ("f", "f0", "fd00:c7::1/64"),
        ("f", "f1", "10.200.2.1/24"),
        ("f", "f1", "fd00:c8::1/64"),
        ("r", "r1", "10.200.2.2/24"),
        ("r", "r1", "fd00:c8::2/64"),
        ("r", "lo", "10.200.9.1/32"),
        ("r", "lo", "fd00:c9::1/128"),
    ] {
        lab.addr(n, dev, addr);
    }
    let c = lab.ns("c");
    ip(&["-n", &c, "route", "add", "default", "via", "10.200.1.1"]);
    ip(&[
        "-n",
        &c,
        "-6",
        "route",
        "add",
        "default",
        "via",
        "fd00:c7::1",
    ]);
    lab
}

/// The gateway test's set-up steps on its [`Lab`].
trait Gateway {
    fn load_rules(&self, file: &str);
    fn tproxy_routing(&self);
    fn start_rsyncd(&mut self, src: &Path);
    fn start_reverse(&mut self, key: &Path);
    fn start_forward(&mut self, key: &Path, mode: &str, extra: &[&str]) -> PathBuf;
    fn start_dnsmasq(&mut self);
}

impl Gateway for Lab {
    /// Loads the shipped ruleset `configs/FILE` into F with its `define` lines set for
    /// this topology. The reverse's address is deliberately not exempted, so the
    /// forward's own loop guard is what refuses it.
    fn load_rules(&self, file: &str) {
        self.load_ruleset(
            "f",
            file,
            &[
                ("lan_if", "\"f0\"".to_owned()),
                ("ctcp_port", TRANSPARENT_PORT.to_string()),
                ("reverse_v4", "{ 192.0.2.99 }".into()),
                ("reverse_v6", "{ 2001:db8::99 }".into()),
                ("exempt_v4", "{ 127.0.0.0/8, 169.254.0.0/16 }".into()),
                ("exempt_v6", "{ ::1, fe80::/10 }".into()),
            ],
        );
    }

    /// Runs `configs/gateway-tproxy.sh` in F (the policy routing TPROXY needs).
    fn tproxy_routing(&self) {
        let script = format!(
            "{}/../configs/gateway-tproxy.sh",
            env!("CARGO_MANIFEST_DIR")
        );
        must(in_ns(&self.ns("f"), "sh").arg(script).arg("add"));
    }

    /// rsyncd in R serving `src` as module `data` on every address.
    fn start_rsyncd(&mut self, src: &Path) {
        let conf = self.dir.join("rsyncd.conf");
        fs::write(
            &conf,
            format!(
                "pid file = {}\nuse chroot = no\nuid = root\ngid = root\n[data]\npath = {}\nread only = yes\n",
                self.dir.join("rsyncd.pid").display(),
                src.display()
            ),
        )
        .unwrap();
        let r = self.ns("r");
        self.spawn(
            "rsyncd",
            in_ns(&r, "rsync")
                .args(["--daemon", "--no-detach"])
                .arg(format!("--config={}", conf.display()))
                .arg(format!("--port={RSYNC_PORT}")),
        );
        wait_until("rsyncd listening", || {
            let out = run(in_ns(&r, "ss").args(["-Hltn", &format!("sport = :{RSYNC_PORT}")]));
            !out.stdout.is_empty()
        });
    }

    /// The real ctcp-reverse binary in R.
    fn start_reverse(&mut self, key: &Path) {
        let r = self.ns("r");
        let log = self.spawn(
            "reverse",
            in_ns(&r, netns::reverse_binary().to_str().unwrap())
                .args(["--listen", REVERSE, "--log-level", "info"])
                .arg("--psk-file")
                .arg(key),
        );
        wait_for_log(&log, "ctcp-reverse started");
    }

    /// ctcp-forward in F with its transparent listener in `mode`, and `extra` flags.
    fn start_forward(&mut self, key: &Path, mode: &str, extra: &[&str]) -> PathBuf {
        let f = self.ns("f");
        let log = self.spawn(
            "forward",
            in_ns(&f, env!("CARGO_BIN_EXE_ctcp-forward"))
                .args(["--peer", REVERSE, "--listen", "127.0.0.1:1080"])
                .args(["--metrics-listen", "127.0.0.1:9100"])
                .args(["--transparent-listen", &format!("[::]:{TRANSPARENT_PORT}")])
                .args(["--transparent-mode", mode, "--log-level", "debug"])
                .args(extra)
                .arg("--psk-file")
                .arg(key),
        );
        wait_for_log(&log, "transparent gateway listener started");
        log
    }

    /// dnsmasq in R answering the local zone `ctcp.test` on both server addresses,
    /// port 53, and nothing else (no upstream, no hosts file).
    fn start_dnsmasq(&mut self) {
        let r = self.ns("r");
        self.spawn(
            "dnsmasq",
            in_ns(&r, "dnsmasq")
                .args([
                    "--keep-in-foreground",
                    "--conf-file=/dev/null",
                    "--no-resolv",
                ])
                .args([
                    "--no-hosts",
                    "--bind-interfaces",
                    "--port=53",
                    "--user=root",
                ])
                .arg(format!("--listen-address={SERVER_V4}"))
                .arg(format!("--listen-address={SERVER_V6}"))
                .arg("--local=/ctcp.test/")
                .arg(format!("--host-record=www.ctcp.test,{DNS_A},{DNS_AAAA}"))
                .arg(format!("--txt-record=txt.ctcp.test,{DNS_TXT}"))
                .arg(format!(
                    "--pid-file={}",
                    self.dir.join("dnsmasq.pid").display()
                )),
        );
        wait_until("dnsmasq listening", || {
            let out = run(in_ns(&r, "ss").args(["-Hlun", "sport = :53"]));
            String::from_utf8_lossy(&out.stdout).lines().count() >= 2
        });
    }
}

/// A tree of `n` files of assorted sizes (empty ones included) in nested directories.
fn make_tree(root: &Path, n: usize) {
    for i in 0..n {
        let d = root
            .join(format!("d{}", i % 17))
            .join(format!("e{}", i % 3));
        fs::create_dir_all(&d).unwrap();
        let mut data = vec![0u8; (i * 7919) % 24_000];
        fill(&mut data, i as u64 + 1);
        fs::write(d.join(format!("f{i}.bin")), data).unwrap();
    }
    let mut big = vec![0u8; 1 << 20];
    fill(&mut big, 99);
    fs::write(root.join("big.bin"), big).unwrap();
}

/// Everything one mode must do: curl and rsync over IPv4 and IPv6 through the tunnel,
/// and the loop guard.
fn gateway_carries_curl_and_rsync(mode: &str) {
    if let Some(why) = skip_reason() {
        eprintln!("skipping the transparent {mode} test: {why}");
        return;
    }
    let mut lab = gateway_lab(&mode[..1]);
    let key = lab.key();
    match mode {
        "redirect" => lab.load_rules("gateway-redirect.nft"),
        _ => {
            lab.load_rules("gateway-tproxy.nft");
            lab.tproxy_routing();
        }
    }
    let mut body = vec![0u8; FILE_SIZE];
    fill(&mut body, 7);
    let want = sha256(&body);
    lab.start_http(
        "r",
        &[
            format!("{SERVER_V4}:{HTTP_PORT}"),
            format!("[{SERVER_V6}]:{HTTP_PORT}"),
        ],
        body,
    );
    let src = lab.dir.join("tree");
    make_tree(&src, 400);
    lab.start_rsyncd(&src);
    lab.start_reverse(&key);
    let fwd_log = lab.start_forward(&key, mode, &[]);
    let c = lab.ns("c");

    for (family, host) in [
        ("IPv4", SERVER_V4.to_owned()),
        ("IPv6", format!("[{SERVER_V6}]")),
    ] {
        // curl: a plain HTTP download, no proxy settings anywhere.
        let out = lab.dir.join(format!("download-{family}.bin"));
        let t = ctcp_runtime::clock::now();
        must(
            in_ns(&c, "curl")
                .args(["-sS", "--fail", "--noproxy", "*", "--max-time", "120", "-o"])
                .arg(&out)
                .arg(format!("http://{host}:{HTTP_PORT}/file.bin")),
        );
        let got = fs::read(&out).unwrap();
        assert_eq!(
            got.len(),
            FILE_SIZE,
            "{mode} {family}: curl got a short file"
        );
        assert_eq!(sha256(&got), want, "{mode} {family}: curl's file differs");
        eprintln!(
            "{mode} {family}: curl {FILE_SIZE} bytes byte-exact in {:?}",
            t.elapsed()
        );

        // rsync: a tree of files, then diff -r.
        let dest = lab.dir.join(format!("copy-{family}"));
        let t = ctcp_runtime::clock::now();
        must(
            in_ns(&c, "rsync")
                .args(["-a", "--timeout=120"])
                .arg(format!("rsync://{host}:{RSYNC_PORT}/data/"))
                .arg(&dest),
        );
        must(Command::new("diff").arg("-r").arg(&src).arg(&dest));
        eprintln!(
            "{mode} {family}: rsync of 401 files, diff -r clean, in {:?}",
            t.elapsed()
        );
    }

    let log = fs::read_to_string(&fwd_log).unwrap();
    for target in [
        format!("target={SERVER_V4}:{HTTP_PORT}"),
        format!("target=[{SERVER_V6}]:{HTTP_PORT}"),
        format!("target={SERVER_V4}:{RSYNC_PORT}"),
        format!("target=[{SERVER_V6}]:{RSYNC_PORT}"),
    ] {
        assert!(
            log.lines()
                .any(|l| l.contains("transparent connection tunnelled") && l.contains(&target)),
            "{mode}: no tunnelled connection to {target} in the forward's log"
        );
    }

    // The loop guard: the listener's own address (the ruleset leaves the gateway's own
    // addresses alone, so this connection reaches the listener un-redirected) and the
    // reverse peer (deliberately not exempted above) are refused, never tunnelled.
    for (url, why) in [
        (
            format!("http://10.200.1.1:{TRANSPARENT_PORT}/"),
            "transparent listener itself",
        ),
        (
            format!("http://[fd00:c7::1]:{TRANSPARENT_PORT}/"),
            "transparent listener itself",
        ),
        (format!("http://10.200.2.2:{HTTP_PORT}/"), "reverse peer"),
    ] {
        let out = run(in_ns(&c, "curl").args(["-sS", "--max-time", "10", &url]));
        assert!(!out.status.success(), "{mode}: {url} was served");
        let host: String = url
            .trim_start_matches("http://")
            .trim_end_matches('/')
            .to_owned();
        wait_until(&format!("the refusal of {url}"), || {
            fs::read_to_string(&fwd_log).is_ok_and(|t| {
                t.lines().any(|l| {
                    l.contains("refused, never tunnelled")
                        && l.contains(why)
                        && l.contains(&format!("original_dst={host}"))
                })
            })
        });
    }
    let log = fs::read_to_string(&fwd_log).unwrap();
    assert!(
        !log.lines()
            .any(|l| l.contains("tunnelled") && l.contains("target=10.200.2.2")),
        "{mode}: a connection to the reverse peer was tunnelled"
    );
}

#[test]
fn redirect_mode_carries_curl_and_rsync_over_ipv4_and_ipv6() {
    gateway_carries_curl_and_rsync("redirect");
}

#[test]
fn tproxy_mode_carries_curl_and_rsync_over_ipv4_and_ipv6() {
    gateway_carries_curl_and_rsync("tproxy");
}

/// `dig` in C asking `server` for `name`/`kind` straight (no proxy settings): the answer
/// section's values, or dig's complaint. dig takes an answer only from the address it
/// asked, so an answer also shows the reply came back from the server's address. It asks
/// from source port `port`: a port of its own per query makes each query a flow of its
/// own (dig's random ports can repeat within the idle timeout).
fn dig(lab: &Lab, server: &str, port: u16, name: &str, kind: &str) -> Result<Vec<String>, String> {
    let any = if server.contains(':') {
        "::"
    } else {
        "0.0.0.0"
    };
    let out = run(in_ns(&lab.ns("c"), "dig").args([
        &format!("@{server}"),
        "-b",
        &format!("{any}#{port}"),
        "-p",
        "53",
        "+short",
        "+time=2",
        "+tries=3",
        "+notcp",
        name,
        kind,
    ]));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() || text.contains(";;") {
        return Err(format!("{text}{}", String::from_utf8_lossy(&out.stderr)));
    }
    Ok(text.lines().map(|l| l.trim().to_owned()).collect())
}

/// The value of the metric sample `name` (with `labels`, e.g. `{reason="idle"}`, or none)
/// from the forward's endpoint.
fn forward_metric(lab: &Lab, name: &str, labels: &str) -> f64 {
    let out = must(in_ns(&lab.ns("f"), "curl").args(["-sS", "http://127.0.0.1:9100/metrics"]));
    let sample = format!("{name}{labels} ");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find(|l| l.starts_with(&sample))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in the forward's metrics"))
}

/// UDP through the transparent gateway (tproxy): a real DNS server (dnsmasq) beyond the
/// tunnel, `dig` on the LAN client with no proxy settings, over IPv4 and IPv6. F has no
/// route to the server, so every answer came through the tunnel as coded datagrams.
#[test]
fn tproxy_mode_carries_dns_over_udp_for_ipv4_and_ipv6() {
    if let Some(why) = skip_reason() {
        eprintln!("skipping the transparent UDP (DNS) test: {why}");
        return;
    }
    let missing: Vec<&str> = ["dnsmasq", "dig"]
        .into_iter()
        .filter(|t| !have(t))
        .collect();
    if !missing.is_empty() {
        eprintln!(
            "skipping the transparent UDP (DNS) test: missing tools: {} (packages dnsmasq-base, dnsutils)",
            missing.join(", ")
        );
        return;
    }
    let mut lab = gateway_lab("u");
    let key = lab.key();
    lab.load_rules("gateway-tproxy.nft");
    lab.tproxy_routing();
    lab.start_dnsmasq();
    lab.start_reverse(&key);
    let udp_listen = format!("[::]:{TRANSPARENT_PORT}");
    let fwd_log = lab.start_forward(
        &key,
        "tproxy",
        &[
            "--transparent-udp-listen",
            &udp_listen,
            "--udp-max-flows",
            "16",
            "--udp-idle-timeout",
            "2s",
        ],
    );
    wait_for_log(&fwd_log, "transparent UDP gateway listener started");
    wait_for_log(&fwd_log, "tunnel session established");

    let mut port = 40_000u16;
    let mut next_port = || {
        port += 1;
        port
    };
    for (family, server) in [("IPv4", SERVER_V4), ("IPv6", SERVER_V6)] {
        let t = ctcp_runtime::clock::now();
        for (name, kind, want) in [
            ("www.ctcp.test", "A", DNS_A.to_owned()),
            ("www.ctcp.test", "AAAA", DNS_AAAA.to_owned()),
            ("txt.ctcp.test", "TXT", format!("\"{DNS_TXT}\"")),
        ] {
            let got = dig(&lab, server, next_port(), name, kind)
                .unwrap_or_else(|e| panic!("{family}: dig {name} {kind} @{server}: {e}"));
            assert_eq!(got, [want], "{family}: dig {name} {kind} @{server}");
        }
        // Many queries, each a flow of its own (a source port of its own): all answered.
        for i in 0..20 {
            let got = dig(&lab, server, next_port(), "www.ctcp.test", "A")
                .unwrap_or_else(|e| panic!("{family}: query {i}: {e}"));
            assert_eq!(got, [DNS_A], "{family}: query {i}");
        }
        eprintln!(
            "tproxy {family}: 23 DNS queries through the tunnel answered in {:?}",
            t.elapsed()
        );
    }
    // The flows rode the session as datagrams and show on the metrics endpoint.
    let opened = forward_metric(&lab, "ctcp_udp_flows_opened_total", "");
    assert!(opened >= 46.0, "{opened}");
    assert!(forward_metric(&lab, "ctcp_udp_datagrams_sent_total", "") >= 46.0);
    assert!(forward_metric(&lab, "ctcp_udp_datagrams_received_total", "") >= 46.0);
    // At most 16 flows at once (--udp-max-flows), the rest evicted or closed idle; after
    // the idle timeout (2s) every flow is closed.
    let closed = |reason: &str| {
        forward_metric(
            &lab,
            "ctcp_udp_flows_closed_total",
            &format!("{{reason=\"{reason}\"}}"),
        )
    };
    assert!(
        closed("evicted") + closed("idle") >= opened - 16.0,
        "the flow cap holds: {} evicted, {} idle of {opened}",
        closed("evicted"),
        closed("idle")
    );
    std::thread::sleep(Duration::from_millis(3500));
    assert_eq!(
        closed("evicted") + closed("idle"),
        opened,
        "idle flows are closed"
    );

    // The loop guard: datagrams to the listener's own address (the ruleset leaves the
    // gateway's addresses alone, so they reach it untouched) and to the reverse peer
    // (deliberately not exempted) are dropped and counted, never tunnelled.
    let denied = || forward_metric(&lab, "ctcp_udp_dropped_total", "{reason=\"denied\"}");
    let before = denied();
    for (server, port) in [
        ("10.200.1.1", TRANSPARENT_PORT.to_string()),
        ("10.200.2.2", "53".to_owned()),
    ] {
        let out = run(in_ns(&lab.ns("c"), "dig").args([
            &format!("@{server}"),
            "-p",
            &port,
            "+tries=1",
            "+time=1",
            "+notcp",
            "www.ctcp.test",
            "A",
        ]));
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            !text.contains(DNS_A),
            "{server}:{port} was answered: {text}"
        );
    }
    wait_until("two refused datagrams counted", || denied() >= before + 2.0);

    // A name outside the zone gets dnsmasq's answer (refused or empty), not a timeout:
    // the flow works both ways for any reply.
    let out = run(in_ns(&lab.ns("c"), "dig").args([
        &format!("@{SERVER_V4}"),
        "+time=2",
        "+tries=2",
        "nowhere.example",
        "A",
    ]));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("status:"), "no answer at all: {text}");
}
