//! Helpers for the tests that run the real binaries in network namespaces
//! (`transparent.rs`, `balancer.rs`): running `ip`, `nft` and friends, a [`Lab`] that owns
//! the namespaces, processes and scratch directory of one test, and a minimal HTTP server
//! that runs inside a namespace.
#![allow(dead_code, unreachable_pub)] // each test file uses a subset
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test] fns

use sha2::{Digest, Sha256};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The pre-shared key the namespace tests give both sides.
pub const KEY_HEX: &str = "5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a";

/// The `ip` binary; `/usr/sbin` first, for a `PATH` without it.
pub fn ip_program() -> &'static str {
    if Path::new("/usr/sbin/ip").exists() {
        "/usr/sbin/ip"
    } else {
        "ip"
    }
}

/// Whether `tool` is on the usual `PATH`.
pub fn have(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .env(
            "PATH",
            "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        )
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Why a namespace test cannot run here (not root, or one of `tools` missing), if so.
pub fn skip_reason(tools: &[&str]) -> Option<String> {
    let uid = Command::new("id").arg("-u").output().ok()?;
    if String::from_utf8_lossy(&uid.stdout).trim() != "0" {
        return Some("not root (network namespaces and nftables need it)".into());
    }
    let missing: Vec<&str> = tools.iter().copied().filter(|t| !have(t)).collect();
    (!missing.is_empty()).then(|| format!("missing tools: {}", missing.join(", ")))
}

/// Runs `cmd` to its end.
pub fn run(cmd: &mut Command) -> Output {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    out
}

/// Runs `cmd` and panics with its stderr unless it succeeded.
pub fn must(cmd: &mut Command) -> Output {
    let out = run(cmd);
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// `ip ARGS`, which must succeed.
pub fn ip(args: &[&str]) {
    must(Command::new(ip_program()).args(args));
}

/// `ip netns exec NS PROGRAM ARGS...`.
pub fn in_ns(ns: &str, program: &str) -> Command {
    let mut c = Command::new(ip_program());
    c.args(["netns", "exec", ns, program]);
    c
}

/// Fills `buf` with a fixed pseudo-random stream chosen by `seed`.
pub fn fill(buf: &mut [u8], seed: u64) {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    for b in buf {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *b = x as u8;
    }
}

/// Hex SHA-256 of `b`.
pub fn sha256(b: &[u8]) -> String {
    Sha256::digest(b)
        .iter()
        .map(|x| format!("{x:02x}"))
        .collect()
}

/// Polls `ok` every 50 ms; panics naming `what` after 20 s.
pub fn wait_until(what: &str, ok: impl FnMut() -> bool) {
    wait_up_to(Duration::from_secs(20), what, ok);
}

/// Polls `ok` every 50 ms; panics naming `what` after `limit`.
pub fn wait_up_to(limit: Duration, what: &str, mut ok: impl FnMut() -> bool) {
    let deadline = ctcp_runtime::clock::now() + limit;
    while !ok() {
        assert!(
            ctcp_runtime::clock::now() < deadline,
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Waits until the log file `log` contains `line`.
pub fn wait_for_log(log: &Path, line: &str) {
    wait_until(line, || {
        fs::read_to_string(log).is_ok_and(|t| t.contains(line))
    });
}

/// The ctcp-reverse binary beside ctcp-forward. `cargo test --workspace` builds it;
/// `cargo test -p ctcp-forward` does not, so it is built here then.
pub fn reverse_binary() -> PathBuf {
    let bin = Path::new(env!("CARGO_BIN_EXE_ctcp-forward")).with_file_name("ctcp-reverse");
    if !bin.exists() {
        let mut build = Command::new(env!("CARGO"));
        build.args(["build", "-p", "ctcp-reverse"]);
        if bin.components().any(|c| c.as_os_str() == "release") {
            build.arg("--release");
        }
        must(&mut build);
    }
    assert!(bin.exists(), "{} was not built", bin.display());
    bin
}

/// One test's namespaces, the processes and in-process servers running in them, and a
/// scratch directory (logs, keys, files); dropping it kills the processes, stops the
/// servers, removes the namespaces and (unless the test failed or `CTCP_GW_KEEP` is set)
/// the directory.
pub struct Lab {
    tag: String,
    names: Vec<String>,
    /// Scratch directory: `NAME.log` (stderr) and `NAME.out` of every spawned process.
    pub dir: PathBuf,
    children: Vec<(String, Child)>,
    servers: Vec<(
        tokio::sync::oneshot::Sender<()>,
        std::thread::JoinHandle<()>,
    )>,
}

impl Lab {
    /// Namespaces `PREFIX-TAG-PID-NAME` for each of `names` (old ones of the same name
    /// removed first), each with its loopback up, and the directory `ctcp-PREFIX-TAG-PID`.
    pub fn new(prefix: &str, tag: &str, names: &[&str]) -> Lab {
        let tag = format!("{prefix}-{tag}-{}", std::process::id());
        let dir = std::env::temp_dir().join(format!("ctcp-{tag}"));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        let lab = Lab {
            tag,
            names: names.iter().map(|n| (*n).to_owned()).collect(),
            dir,
            children: Vec::new(),
            servers: Vec::new(),
        };
        for n in names {
            let ns = lab.ns(n);
            let _ = Command::new(ip_program())
                .args(["netns", "del", &ns])
                .output();
            ip(&["netns", "add", &ns]);
            ip(&["-n", &ns, "link", "set", "lo", "up"]);
        }
        lab
    }

    /// The full name of namespace `name`.
    pub fn ns(&self, name: &str) -> String {
        format!("{}-{name}", self.tag)
    }

    /// A veth pair: `dev_a` in namespace `a`, `dev_b` in `b`, both up.
    pub fn veth(&self, a: &str, dev_a: &str, b: &str, dev_b: &str) {
        let (na, nb) = (self.ns(a), self.ns(b));
        ip(&[
            "link", "add", dev_a, "netns", &na, "type", "veth", "peer", dev_b, "netns", &nb,
        ]);
        ip(&["-n", &na, "link", "set", dev_a, "up"]);
        ip(&["-n", &nb, "link", "set", dev_b, "up"]);
    }

    /// Adds `cidr` to `dev` in namespace `name` (IPv6 without duplicate detection).
    pub fn addr(&self, name: &str, dev: &str, cidr: &str) {
        let ns = self.ns(name);
        let mut args = vec!["-n", ns.as_str(), "addr", "add", cidr, "dev", dev];
        if cidr.contains(':') {
            args.push("nodad");
        }
        ip(&args);
    }

    /// Writes the test key ([`KEY_HEX`], mode 0600) into the directory; returns its path.
    pub fn key(&self) -> PathBuf {
        self.key_file("psk", KEY_HEX)
    }

    /// Writes the key `hex` (mode 0600) into the directory as `name`; returns its path.
    pub fn key_file(&self, name: &str, hex: &str) -> PathBuf {
        let key = self.dir.join(name);
        fs::write(&key, hex).unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            fs::set_permissions(&key, fs::Permissions::from_mode(0o600)).unwrap();
        }
        key
    }

    /// Loads the shipped ruleset `configs/FILE` into namespace `name` with each of its
    /// `define KEY = …` lines named in `values` set to the given value (all must exist).
    pub fn load_ruleset(&self, name: &str, file: &str, values: &[(&str, String)]) {
        let path = format!("{}/../configs/{file}", env!("CARGO_MANIFEST_DIR"));
        let text = fs::read_to_string(&path).unwrap();
        let mut set = 0;
        let text: String = text
            .lines()
            .map(|l| {
                for (k, v) in values {
                    if l.starts_with(&format!("define {k} =")) {
                        set += 1;
                        return format!("define {k} = {v}\n");
                    }
                }
                format!("{l}\n")
            })
            .collect();
        assert_eq!(set, values.len(), "{file}: a define line is missing");
        let rules = self.dir.join(file);
        fs::write(&rules, text).unwrap();
        must(in_ns(&self.ns(name), "nft").arg("-f").arg(&rules));
    }

    /// Spawns `cmd` as process `name`, stdout to `DIR/NAME.out`, stderr to
    /// `DIR/NAME.log` (returned).
    pub fn spawn(&mut self, name: &str, cmd: &mut Command) -> PathBuf {
        let log = self.dir.join(format!("{name}.log"));
        let child = cmd
            .stdin(Stdio::null())
            .stdout(fs::File::create(self.dir.join(format!("{name}.out"))).unwrap())
            .stderr(fs::File::create(&log).unwrap())
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {name}: {e}"));
        self.children.push((name.to_owned(), child));
        log
    }

    /// Kills process `name` (SIGKILL: a crash, nothing flushed) and reaps it.
    pub fn kill(&mut self, name: &str) {
        let i = self
            .children
            .iter()
            .position(|(n, _)| n == name)
            .unwrap_or_else(|| panic!("no process {name}"));
        let (_, mut child) = self.children.remove(i);
        child.kill().unwrap();
        child.wait().unwrap();
    }

    /// An HTTP server (in this process, on a thread inside namespace `name`) on each of
    /// `addrs`, serving `body` for any GET.
    pub fn start_http(&mut self, name: &str, addrs: &[String], body: Vec<u8>) {
        let netns = fs::File::open(format!("/run/netns/{}", self.ns(name))).unwrap();
        let addrs = addrs.to_vec();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let thread = std::thread::spawn(move || {
            // Sockets this thread makes from here on live in the namespace.
            nix::sched::setns(&netns, nix::sched::CloneFlags::CLONE_NEWNET).unwrap();
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let body = std::sync::Arc::new(body);
                for addr in addrs {
                    let l = tokio::net::TcpListener::bind(&addr).await.unwrap();
                    tokio::spawn(serve_http(l, body.clone()));
                }
                ready_tx.send(()).unwrap();
                let _ = stop_rx.await;
            });
        });
        ready_rx
            .recv_timeout(Duration::from_secs(10))
            .expect("HTTP server");
        self.servers.push((stop_tx, thread));
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        for (_, c) in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
        for (stop, thread) in self.servers.drain(..) {
            let _ = stop.send(());
            let _ = thread.join();
        }
        for n in &self.names {
            let _ = Command::new(ip_program())
                .args(["netns", "del", &self.ns(n)])
                .output();
        }
        if std::env::var_os("CTCP_GW_KEEP").is_none() && !std::thread::panicking() {
            let _ = fs::remove_dir_all(&self.dir);
        } else {
            eprintln!("logs kept in {}", self.dir.display());
        }
    }
}

/// A minimal HTTP/1.1 server: any GET gets `body` with its length, then the connection
/// closes.
async fn serve_http(l: tokio::net::TcpListener, body: std::sync::Arc<Vec<u8>>) {
    while let Ok((mut c, _)) = l.accept().await {
        let body = body.clone();
        tokio::spawn(async move {
            let mut req = Vec::new();
            let mut buf = [0u8; 1024];
            while !req.windows(4).any(|w| w == b"\r\n\r\n") {
                match c.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => req.extend_from_slice(&buf[..n]),
                }
            }
            let head = format!(
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nContent-Type: application/octet-stream\r\nConnection: close\r\n\r\n",
                body.len()
            );
            if c.write_all(head.as_bytes()).await.is_ok() && c.write_all(&body).await.is_ok() {
                let _ = c.shutdown().await;
            }
        });
    }
}
