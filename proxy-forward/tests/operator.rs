//! The forward binary as an operator meets it: keygen, --check-config's verdicts and
//! notes, start-up warnings, start-up errors, and SIGHUP reloading the SOCKS users.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test] fns

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const KEY: [u8; 32] = [0x5a; 32];

fn hex(key: &[u8; 32]) -> String {
    key.iter().map(|b| format!("{b:02x}")).collect()
}

fn dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("ctcp-fwd-op-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn forward() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_ctcp-forward"));
    c.env_remove("CTCP_PSK").env_remove("RUST_LOG");
    c
}

fn run(c: &mut Command) -> (bool, String, String) {
    let Output {
        status,
        stdout,
        stderr,
    } = c.stdin(Stdio::null()).output().unwrap();
    (
        status.success(),
        String::from_utf8_lossy(&stdout).into_owned(),
        String::from_utf8_lossy(&stderr).into_owned(),
    )
}

#[cfg(unix)]
fn mode(p: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
}

#[test]
fn keygen_writes_a_private_key_once_and_prints_one_without_out() {
    let d = dir("keygen");
    let f = d.join("psk");
    let (ok, out, err) = run(forward().args(["keygen", "--out"]).arg(&f));
    assert!(ok, "{err}");
    let text = std::fs::read_to_string(&f).unwrap();
    assert_eq!(text.len(), 65, "64 hex digits and a newline: {text:?}");
    let key = ctcp_config::load_psk(Some(&f)).unwrap();
    assert!(
        out.contains(&ctcp_runtime::keys::fingerprint(&key)),
        "{out}"
    );
    #[cfg(unix)]
    assert_eq!(mode(&f), 0o600);

    let (ok, _, err) = run(forward().args(["keygen", "--out"]).arg(&f));
    assert!(!ok && err.contains("--force"), "{err}");
    assert_eq!(
        std::fs::read_to_string(&f).unwrap(),
        text,
        "not overwritten"
    );
    let (ok, _, err) = run(forward().args(["keygen", "--force", "--out"]).arg(&f));
    assert!(ok, "{err}");
    assert_ne!(std::fs::read_to_string(&f).unwrap(), text);

    let (ok, out, err) = run(forward().arg("keygen"));
    assert!(ok, "{err}");
    assert!(ctcp_config::parse_key(out.as_bytes()).is_ok(), "{out:?}");
    assert!(err.contains("SHA256:"), "fingerprint on stderr: {err}");
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn check_config_prints_the_fingerprint_and_warns_about_an_open_proxy() {
    let fp = ctcp_runtime::keys::fingerprint(&KEY);
    let (ok, out, err) = run(forward().env("CTCP_PSK", hex(&KEY)).args([
        "--check-config",
        "--peer",
        "127.0.0.1:7000",
    ]));
    assert!(ok, "{err}");
    assert!(
        out.contains(&format!(
            "not the key; it must match the other gateway's): {fp}"
        )),
        "{out}"
    );
    assert!(!out.contains(&hex(&KEY)), "never the key itself");
    assert!(!out.contains("warning"), "{out}");

    let (ok, out, _) = run(forward().env("CTCP_PSK", hex(&KEY)).args([
        "--check-config",
        "--peer",
        "127.0.0.1:7000",
        "--listen",
        "0.0.0.0:1080",
    ]));
    assert!(ok);
    assert!(out.contains("warning: OPEN PROXY"), "{out}");
    let (_, out, _) = run(forward().env("CTCP_PSK", hex(&KEY)).args([
        "--check-config",
        "--peer",
        "127.0.0.1:7000",
        "--listen",
        "0.0.0.0:1080",
        "--socks-user",
        "alice:pw",
    ]));
    assert!(!out.contains("OPEN PROXY"), "{out}");

    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let d = dir("mode");
        let f = d.join("psk");
        std::fs::write(&f, format!("{}\n", hex(&KEY))).unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).unwrap();
        let (ok, out, _) = run(forward()
            .args(["--check-config", "--peer", "127.0.0.1:7000", "--psk-file"])
            .arg(&f));
        assert!(ok);
        assert!(
            out.contains("warning: key file") && out.contains("chmod 600"),
            "{out}"
        );
        std::fs::remove_dir_all(&d).unwrap();
    }
}

#[test]
fn check_config_refuses_what_it_used_to_accept() {
    let d = dir("refuse");
    let cfg = |name: &str, text: &str| {
        let p = d.join(name);
        std::fs::write(&p, text).unwrap();
        p
    };
    let key = cfg("psk", &format!("{}\n", hex(&KEY)));
    let cases: Vec<(Vec<String>, &str)> = vec![
        (
            vec!["--log-level".into(), "bogus".into()],
            "is not a log level",
        ),
        (vec!["--peer".into(), "127.0.0.1".into()], "no port"),
        (
            vec![
                "--config".into(),
                cfg("level.toml", "[log]\nlevel = \"verbose\"\n")
                    .display()
                    .to_string(),
            ],
            "key 'log.level'",
        ),
        (
            vec![
                "--config".into(),
                cfg("type.toml", "[transport]\nwindow = \"big\"\n")
                    .display()
                    .to_string(),
            ],
            "key 'transport.window'",
        ),
        (
            vec![
                "--config".into(),
                cfg("dur.toml", "open_timeout = \"3 fortnights\"\n")
                    .display()
                    .to_string(),
            ],
            "ms, s (sec), m (min)",
        ),
        (
            vec![
                "--config".into(),
                cfg("peer.toml", "peer = \"127.0.0.1\"\n")
                    .display()
                    .to_string(),
            ],
            "key 'peer'",
        ),
    ];
    for (args, why) in cases {
        let (ok, _, err) = run(forward()
            .args(["--check-config", "--psk-file"])
            .arg(&key)
            .args(if args.iter().any(|a| a == "--peer" || a == "--config") {
                vec![]
            } else {
                vec!["--peer", "127.0.0.1:7000"]
            })
            .args(&args));
        assert!(!ok, "{args:?} accepted");
        assert!(err.contains(why), "{args:?}: {err}");
    }
    // A key file with a typo: refused, with how to make a good one.
    let bad = cfg("typo", &format!("{}x\n", &hex(&KEY)[..63]));
    let (ok, _, err) = run(forward()
        .args(["--check-config", "--peer", "127.0.0.1:7000", "--psk-file"])
        .arg(&bad));
    assert!(
        !ok && err.contains("not a hex digit") && err.contains("keygen --out FILE"),
        "{err}"
    );
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn a_bind_error_prints_its_cause_once() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let (ok, _, err) = run(forward().env("CTCP_PSK", hex(&KEY)).args([
        "--peer",
        "127.0.0.1:7000",
        "--listen",
        &addr,
        "--log-level",
        "error",
    ]));
    assert!(!ok);
    assert!(
        err.contains(&format!("cannot bind SOCKS listener on {addr}")),
        "{err}"
    );
    assert_eq!(err.matches("os error").count(), 1, "{err}");
}

/// A running forward whose stderr lines arrive on a channel.
struct Proc {
    child: Child,
    lines: mpsc::Receiver<String>,
}

impl Proc {
    fn spawn(c: &mut Command) -> Proc {
        let mut child = c
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = child.stderr.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for l in BufReader::new(stderr).lines().map_while(Result::ok) {
                eprintln!("[ctcp-forward] {l}");
                if tx.send(l).is_err() {
                    break;
                }
            }
        });
        Proc { child, lines }
    }

    /// The next line containing `pat` (each line within 20 s of the one before).
    fn wait_for(&self, pat: &str) -> String {
        loop {
            match self.lines.recv_timeout(Duration::from_secs(20)) {
                Ok(l) if l.contains(pat) => return l,
                Ok(_) => {}
                Err(_) => panic!("no log line with {pat:?}"),
            }
        }
    }

    fn sighup(&self) {
        let ok = Command::new("kill")
            .args(["-HUP", &self.child.id().to_string()])
            .status()
            .unwrap()
            .success();
        assert!(ok);
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The value of `key=` in a tracing text line.
fn field(line: &str, key: &str) -> String {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(&format!("{key}=")))
        .unwrap_or_else(|| panic!("no {key}= in {line:?}"))
        .to_owned()
}

#[test]
fn startup_logs_the_fingerprint_and_warns_about_an_open_proxy() {
    let p = Proc::spawn(forward().env("CTCP_PSK", hex(&KEY)).args([
        "--peer",
        "127.0.0.1:9",
        "--listen",
        "0.0.0.0:0",
    ]));
    let l = p.wait_for("key fingerprint");
    assert!(l.contains(&ctcp_runtime::keys::fingerprint(&KEY)), "{l}");
    assert!(p.wait_for("OPEN PROXY").contains("WARN"));
}

/// RFC 1929 login through the forward's SOCKS port; true if accepted.
async fn login(socks: &str, user: &str, pass: &str) -> bool {
    let mut s = TcpStream::connect(socks).await.unwrap();
    s.write_all(&[5, 1, 2]).await.unwrap();
    let mut m = [0u8; 2];
    s.read_exact(&mut m).await.unwrap();
    assert_eq!(m, [5, 2], "username/password required");
    let mut req = vec![1, user.len() as u8];
    req.extend_from_slice(user.as_bytes());
    req.push(pass.len() as u8);
    req.extend_from_slice(pass.as_bytes());
    s.write_all(&req).await.unwrap();
    let mut status = [0u8; 2];
    s.read_exact(&mut status).await.unwrap();
    status[1] == 0
}

#[tokio::test]
async fn sighup_reloads_the_socks_users_and_keeps_them_on_a_bad_file() {
    let d = dir("reload");
    let cfg = d.join("forward.toml");
    let users = |pw: &str| {
        format!(
            "listen = \"127.0.0.1:0\"\npeer = \"127.0.0.1:9\"\n[[socks_users]]\nusername = \"alice\"\npassword = \"{pw}\"\n"
        )
    };
    std::fs::write(&cfg, users("one")).unwrap();
    let p = Proc::spawn(
        forward()
            .env("CTCP_PSK", hex(&KEY))
            .arg("--config")
            .arg(&cfg),
    );
    let socks = field(&p.wait_for("ctcp-forward started"), "socks");
    assert!(login(&socks, "alice", "one").await);
    assert!(!login(&socks, "alice", "two").await);

    std::fs::write(&cfg, users("two")).unwrap();
    p.sighup();
    p.wait_for("configuration reloaded");
    assert!(
        login(&socks, "alice", "two").await,
        "new users apply to new connections"
    );
    assert!(!login(&socks, "alice", "one").await);

    std::fs::write(
        &cfg,
        format!("{}[log]\nlevel = \"verbose\"\n", users("three")),
    )
    .unwrap();
    p.sighup();
    assert!(p
        .wait_for("configuration not reloaded")
        .contains("log.level"));
    assert!(
        login(&socks, "alice", "two").await,
        "a bad file keeps the old users"
    );
    assert!(!login(&socks, "alice", "three").await);
    drop(p);
    std::fs::remove_dir_all(&d).unwrap();
}

/// SOCKS5 CONNECT (no authentication) to an IPv4 `target`; the open stream.
async fn connect(socks: &str, target: std::net::SocketAddr) -> TcpStream {
    let std::net::SocketAddr::V4(t) = target else {
        unreachable!("IPv4 loopback")
    };
    let mut s = TcpStream::connect(socks).await.unwrap();
    let mut req = vec![5, 1, 0, 5, 1, 0, 1];
    req.extend_from_slice(&t.ip().octets());
    req.extend_from_slice(&t.port().to_be_bytes());
    s.write_all(&req).await.unwrap();
    let mut reply = [0u8; 12];
    s.read_exact(&mut reply).await.unwrap();
    assert_eq!((reply[1], reply[3]), (0, 0), "{reply:?}");
    s
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_shows_the_running_processs_sessions() {
    let d = dir("status");
    // The reverse runs in this process; an echo server behind it.
    let mut rs = ctcp_runtime::ReverseSettings::new(ctcp_proto::Psk::new(&KEY).unwrap());
    rs.listen = "127.0.0.1:0".parse().unwrap();
    rs.acl = ctcp_runtime::Acl {
        rules: Vec::new(),
        default_allow: true,
    };
    let rev = ctcp_runtime::start_reverse(rs).await.unwrap();
    let echo = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let target = echo.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut c, _)) = echo.accept().await {
            tokio::spawn(async move {
                let (mut r, mut w) = c.split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
            });
        }
    });

    let cfg = d.join("forward.toml");
    std::fs::write(
        &cfg,
        format!(
            "listen = \"127.0.0.1:0\"\npeer = \"{}\"\nmetrics_listen = \"127.0.0.1:0\"\n",
            rev.local_addr
        ),
    )
    .unwrap();
    let p = Proc::spawn(
        forward()
            .env("CTCP_PSK", hex(&KEY))
            .arg("--config")
            .arg(&cfg),
    );
    // These three lines come from different tasks, in no fixed order.
    let (mut metrics, mut socks, mut session) = (None, None, None);
    while metrics.is_none() || socks.is_none() || session.is_none() {
        let l = p.wait_for("");
        if l.contains("metrics endpoint listening") {
            metrics = Some(field(&l, "addr"));
        } else if l.contains("ctcp-forward started") {
            socks = Some(field(&l, "socks"));
        } else if l.contains("tunnel session established") {
            session = Some(field(&l, "session"));
        }
    }
    let (metrics, socks, session) = (metrics.unwrap(), socks.unwrap(), session.unwrap());

    // One stream open, carrying data while status samples.
    let mut s = connect(&socks, target).await;
    let block = vec![0x42u8; 256 * 1024];
    s.write_all(&block).await.unwrap();
    let mut back = vec![0u8; block.len()];
    s.read_exact(&mut back).await.unwrap();
    assert_eq!(back, block);

    let status = forward()
        .args(["status", "--sample", "200ms", "--metrics-listen", &metrics])
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&status.stdout);
    assert!(
        status.status.success(),
        "{out}{}",
        String::from_utf8_lossy(&status.stderr)
    );
    assert!(
        out.starts_with(&format!("ctcp-forward {}", env!("CARGO_PKG_VERSION"))),
        "{out}"
    );
    assert!(out.contains("SOCKS replies: 1 succeeded"), "{out}");
    let header = out.lines().find(|l| l.starts_with("SESSION")).unwrap();
    for col in [
        "PEER",
        "RTT",
        "WINDOW",
        "LOSS",
        "REPAIR",
        "GOODPUT IN",
        "STREAMS",
    ] {
        assert!(header.contains(col), "{header}");
    }
    // The row names the session as the log did, with the peer, state and one stream.
    let row = out
        .lines()
        .find(|l| l.starts_with(&format!("{session} ")))
        .unwrap_or_else(|| panic!("no row for session {session}:\n{out}"));
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(cells[1], rev.local_addr.to_string(), "{row}");
    assert_eq!(cells[2], "established", "{row}");
    assert_eq!(cells.last(), Some(&"1"), "streams: {row}");
    drop(s);

    // The same, found through the configuration file instead of the flag.
    let (ok, out, err) = run(forward()
        .args(["status", "--sample", "0s", "--config"])
        .arg(&cfg));
    // The file says port 0, which no longer names the listener: a clear error, not a hang.
    assert!(
        !ok && err.contains("cannot read the metrics endpoint"),
        "{out}{err}"
    );

    // No listener configured: says which key to set.
    let bare = d.join("bare.toml");
    std::fs::write(&bare, "peer = \"127.0.0.1:9\"\n").unwrap();
    let (ok, _, err) = run(forward().arg("--config").arg(&bare).arg("status"));
    assert!(
        !ok && err.contains("no metrics listener configured: set metrics_listen"),
        "{err}"
    );
    drop(p);
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn gen_man_and_gen_completions_write_what_the_package_installs() {
    let d = dir("gen");
    let (ok, out, err) = run(forward().arg("gen-man").arg(d.join("man")));
    assert!(ok, "{err}");
    let mut pages: Vec<String> = std::fs::read_dir(d.join("man"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    pages.sort();
    // The hidden generators get no page of their own.
    assert_eq!(
        pages,
        [
            "ctcp-forward-keygen.1",
            "ctcp-forward-status.1",
            "ctcp-forward.1"
        ],
        "{out}"
    );
    let main = std::fs::read_to_string(d.join("man/ctcp-forward.1")).unwrap();
    assert!(main.starts_with(".ie \\n(.g .ds Aq"), "roff: {main:.80}");
    assert!(main.contains("psk\\-file"), "every flag is documented");
    let (ok, _, err) = run(forward().arg("gen-completions").arg(d.join("c")));
    assert!(ok, "{err}");
    for f in ["ctcp-forward.bash", "_ctcp-forward", "ctcp-forward.fish"] {
        let text = std::fs::read_to_string(d.join("c").join(f)).unwrap();
        assert!(text.contains("status"), "{f} completes the subcommands");
    }
    std::fs::remove_dir_all(&d).unwrap();
}
