//! Real sockets on loopback: the forward and reverse roles in one process, real TCP
//! clients and servers around them. Ports are 0, readiness is awaited, every wait has a
//! deadline, every transfer is SHA-256 checked.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test] fns

use ctcp_proto::Psk;
use ctcp_runtime::{start_forward, Acl, ForwardSettings, Rule, Running};
use sha2::{Digest, Sha256};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

mod common;
use common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bulk_transfer_is_byte_exact() {
    let p = pair().await;
    let echo = echo_server().await;
    let data = pattern(1, 100 << 20);
    // 100 MB each way; the deadline only catches a hang, with room for a loaded CI box.
    let back = tokio::time::timeout(4 * T, round_trip(p.fwd.local_addr, echo, &data))
        .await
        .expect("no hang");
    assert_eq!(back.len(), data.len());
    assert_eq!(Sha256::digest(&back), Sha256::digest(&data));
    // The metrics endpoint's rendering reflects the session and what it carried.
    let m = ctcp_runtime::metrics::render(&p.rev.driver);
    assert!(m.contains("ctcp_sessions 1"), "{m}");
    let read: u64 = m
        .lines()
        .find(|l| l.starts_with("ctcp_stream_bytes_read_total"))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .expect("stream bytes metric");
    assert!(read >= data.len() as u64, "reverse read {read} bytes");
}

/// Reads `r` to its end a few KiB at a time with pauses, as a slow application would,
/// and returns the bytes' SHA-256.
async fn read_slowly(mut r: impl tokio::io::AsyncRead + Unpin) -> [u8; 32] {
    let mut h = Sha256::new();
    let mut buf = [0u8; 4096];
    for i in 0u64.. {
        let n = r.read(&mut buf).await.unwrap();
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
        if i % 4 == 0 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
    h.finalize().into()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_readers_at_both_ends_get_every_byte() {
    // Both applications read slower than the tunnel delivers, through small socket
    // buffers, so the proxies' writes to them are refused or partial: the bytes a socket
    // did not take must stay in the stream, in order, until it does.
    let p = pair().await;
    let small = 16 * 1024;
    let sock = tokio::net::TcpSocket::new_v4().unwrap();
    sock.set_recv_buffer_size(small).unwrap();
    sock.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let listener = sock.listen(16).unwrap();
    let target = listener.local_addr().unwrap();
    let (up, down) = (pattern(11, 6 << 20), pattern(12, 6 << 20));
    let (up_hash, down_hash): ([u8; 32], [u8; 32]) =
        (Sha256::digest(&up).into(), Sha256::digest(&down).into());
    let server = tokio::spawn(async move {
        let (c, _) = listener.accept().await.unwrap();
        let (r, mut w) = c.into_split();
        let send = async move {
            w.write_all(&down).await.unwrap();
            w.shutdown().await.unwrap();
        };
        tokio::join!(send, read_slowly(r)).1
    });
    let client = async {
        let sock = tokio::net::TcpSocket::new_v4().unwrap();
        sock.set_recv_buffer_size(small).unwrap();
        let s = sock.connect(p.fwd.local_addr).await.unwrap();
        let s = socks_over(s, &v4(target), target.port(), 1)
            .await
            .expect("connect ok");
        let (r, mut w) = s.into_split();
        let send = async move {
            w.write_all(&up).await.unwrap();
            w.shutdown().await.unwrap();
        };
        tokio::join!(send, read_slowly(r)).1
    };
    let (got_down, got_up) = tokio::time::timeout(T, async {
        let d = client.await;
        (d, server.await.unwrap())
    })
    .await
    .expect("no hang");
    assert_eq!(got_down, down_hash, "target to client");
    assert_eq!(got_up, up_hash, "client to target");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_concurrent_streams_are_byte_exact() {
    let p = pair().await;
    let echo = echo_server().await;
    let mut tasks = Vec::new();
    for i in 0..200u64 {
        let proxy = p.fwd.local_addr;
        tasks.push(tokio::spawn(async move {
            let data = pattern(100 + i, 16 * 1024 + (i as usize * 997) % 65536);
            let back = round_trip(proxy, echo, &data).await;
            assert_eq!(Sha256::digest(&back), Sha256::digest(&data), "stream {i}");
        }));
    }
    tokio::time::timeout(T, async {
        for t in tasks {
            t.await.unwrap();
        }
    })
    .await
    .expect("no hang");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn socks_reply_codes() {
    let deny = Rule {
        allow: false,
        net: "127.0.0.3/32".parse().unwrap(),
        ports: 0..=65535,
    };
    let p = pair_with(
        &[7; 32],
        &[7; 32],
        Acl {
            rules: vec![deny],
            default_allow: true,
        },
        |_, _| {},
    )
    .await;
    let proxy = p.fwd.local_addr;
    // A closed port: bind then drop to get one nobody listens on.
    let closed = TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap()
        .local_addr()
        .unwrap();
    let echo = echo_server().await;
    let r = tokio::time::timeout(T, async {
        (
            socks(proxy, &v4(closed), closed.port(), 1).await.err(),
            socks(proxy, &domain("nonexistent.invalid"), 80, 1)
                .await
                .err(),
            socks(proxy, &[1, 127, 0, 0, 3], 80, 1).await.err(),
            socks(proxy, &v4(echo), echo.port(), 2).await.err(),
            socks(proxy, &domain("localhost"), echo.port(), 1)
                .await
                .err(),
        )
    })
    .await
    .expect("no hang");
    assert_eq!(r.0, Some(0x05), "refused");
    assert_eq!(r.1, Some(0x04), "unresolvable name");
    assert_eq!(r.2, Some(0x02), "ACL denied");
    assert_eq!(r.3, Some(0x07), "BIND not supported");
    assert_eq!(r.4, None, "a name the reverse side resolves connects");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_psk_gets_a_failure_reply_and_no_session() {
    let p = pair_with(&[7; 32], &[8; 32], Acl::allow_all(), |f, _| {
        f.open_timeout = Duration::from_secs(2);
        f.transport.handshake_timeout = Duration::from_secs(1);
    })
    .await;
    let echo = echo_server().await;
    let r = tokio::time::timeout(T, socks(p.fwd.local_addr, &v4(echo), echo.port(), 1))
        .await
        .expect("no hang");
    assert_eq!(r.err(), Some(0x01));
    assert!(
        p.rev.driver.stats().is_empty(),
        "the reverse side must not keep a session"
    );
    assert!(
        p.rev.driver.drops().bad_handshake > 0,
        "bad handshakes are counted"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reverse_stream_tasks_dying_mid_transfer_end_the_client_connection() {
    let p = pair_with(&[7; 32], &[7; 32], Acl::allow_all(), |f, _| {
        f.transport.idle_timeout = Duration::from_secs(2);
        f.transport.keepalive = Duration::from_millis(500);
    })
    .await;
    // A server that accepts and reads forever.
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let target = l.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut c, _)) = l.accept().await {
            tokio::spawn(async move {
                let mut buf = vec![0u8; 65536];
                while matches!(c.read(&mut buf).await, Ok(n) if n > 0) {}
            });
        }
    });
    let mut s = socks(p.fwd.local_addr, &v4(target), target.port(), 1)
        .await
        .expect("connect ok");
    let _keep_forward = &p.fwd;
    s.write_all(&pattern(5, 1 << 20)).await.unwrap();
    // Kill the reverse role's tasks (its target connections drop without a graceful
    // close; the UDP driver task keeps running, so this is not a whole-process crash).
    p.rev.done.abort();
    let Running { driver, .. } = p.rev;
    drop(driver);
    let started = ctcp_runtime::clock::now();
    let (mut rd, mut wr) = s.into_split();
    let outcome = tokio::time::timeout(Duration::from_secs(15), async {
        let chunk = vec![0u8; 64 * 1024];
        let mut buf = [0u8; 1024];
        loop {
            tokio::select! {
                w = wr.write_all(&chunk) => if w.is_err() { return "write error" },
                r = rd.read(&mut buf) => match r { Ok(0) => return "eof", Err(_) => return "read error", Ok(_) => {} },
            }
        }
    })
    .await;
    assert!(
        outcome.is_ok(),
        "client connection hung after the reverse proxy died"
    );
    assert!(started.elapsed() < Duration::from_secs(15));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curl_socks5_hostname_fetches_a_file() {
    if std::process::Command::new("curl")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!("curl not installed; skipping (CI installs it)");
        return;
    }
    let p = pair().await;
    let body = pattern(9, 3 << 20);
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let web = l.local_addr().unwrap();
    let served = body.clone();
    tokio::spawn(async move {
        while let Ok((mut c, _)) = l.accept().await {
            let served = served.clone();
            tokio::spawn(async move {
                let mut req = vec![0u8; 4096];
                let _ = c.read(&mut req).await;
                let head = format!(
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    served.len()
                );
                let _ = c.write_all(head.as_bytes()).await;
                let _ = c.write_all(&served).await;
                let _ = c.shutdown().await;
            });
        }
    });
    let proxy = p.fwd.local_addr;
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new("curl")
            .args([
                "-s",
                "--max-time",
                "20",
                "--socks5-hostname",
                &proxy.to_string(),
                &format!("http://localhost:{}/file", web.port()),
            ])
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert!(
        out.status.success(),
        "curl failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(Sha256::digest(&out.stdout), Sha256::digest(&body));
}

fn have(tool: &str) -> bool {
    std::process::Command::new(tool)
        .arg("--version")
        .output()
        .is_ok()
}

/// The design's headline use: `proxychains4 rsync` of a tree through the pair, from a local
/// rsync daemon, checked file by file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxychains_rsync_tree_is_byte_exact() {
    if !have("proxychains4") || !have("rsync") {
        eprintln!("proxychains4 or rsync not installed; skipping (CI installs them)");
        return;
    }
    let p = pair().await;
    let root = std::env::temp_dir().join(format!("ctcp-rsync-{}", std::process::id()));
    let (src, dst) = (root.join("src"), root.join("dst"));
    std::fs::create_dir_all(src.join("a/b/c")).unwrap();
    std::fs::create_dir_all(&dst).unwrap();
    std::fs::write(src.join("big.bin"), pattern(11, 50 << 20)).unwrap();
    for i in 0..1000u64 {
        std::fs::write(
            src.join(format!("a/b/c/f{i}.txt")),
            pattern(1000 + i, (i as usize * 37) % 4000),
        )
        .unwrap();
    }
    // The daemon listens on 127.0.0.2 (proxychains exempts nothing by default, but keep it
    // distinct from the proxy's own address).
    let port = TcpListener::bind("127.0.0.2:0")
        .await
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let conf = root.join("rsyncd.conf");
    std::fs::write(
        &conf,
        format!(
            "use chroot = no\nuid = root\ngid = root\n[mod]\npath = {}\nread only = no\n",
            dst.display()
        ),
    )
    .unwrap();
    let mut daemon = std::process::Command::new("rsync")
        .args([
            "--daemon",
            "--no-detach",
            "--address",
            "127.0.0.2",
            "--port",
            &port.to_string(),
            "--config",
        ])
        .arg(&conf)
        .spawn()
        .unwrap();
    let pc = root.join("proxychains.conf");
    std::fs::write(
        &pc,
        format!(
            "strict_chain\nquiet_mode\nproxy_dns\n[ProxyList]\nsocks5 127.0.0.1 {}\n",
            p.fwd.local_addr.port()
        ),
    )
    .unwrap();
    // Wait for the daemon to listen.
    let deadline = ctcp_runtime::clock::now() + Duration::from_secs(10);
    while TcpStream::connect(("127.0.0.2", port)).await.is_err() {
        assert!(
            ctcp_runtime::clock::now() < deadline,
            "rsync daemon did not start"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (src2, pc2) = (src.clone(), pc.clone());
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new("proxychains4")
            .arg("-q")
            .arg("-f")
            .arg(&pc2)
            .args(["rsync", "-a", "--timeout=30"])
            .arg(format!("{}/", src2.display()))
            .arg(format!("rsync://127.0.0.2:{port}/mod/"))
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let _ = daemon.kill();
    let _ = daemon.wait();
    assert!(
        out.status.success(),
        "rsync failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut files = 0;
    let mut stack = vec![src.clone()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let path = e.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else {
                let rel = path.strip_prefix(&src).unwrap();
                let a = std::fs::read(&path).unwrap();
                let b = std::fs::read(dst.join(rel)).unwrap_or_default();
                assert_eq!(Sha256::digest(&a), Sha256::digest(&b), "{}", rel.display());
                files += 1;
            }
        }
    }
    assert_eq!(files, 1001);
    std::fs::remove_dir_all(&root).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_socks_clients_get_codes_or_time_out() {
    let p = pair_with(&[7; 32], &[7; 32], Acl::allow_all(), |f, _| {
        f.handshake_timeout = Duration::from_millis(500);
    })
    .await;
    let proxy = p.fwd.local_addr;
    let long_name = domain(&"a".repeat(255));
    let r = tokio::time::timeout(T, async {
        (
            socks(proxy, &[5, 1, 2, 3, 4], 80, 1).await.err(),
            socks(proxy, &long_name, 80, 1).await.err(),
        )
    })
    .await
    .expect("no hang");
    assert_eq!(r.0, Some(0x08), "unknown address type");
    assert_eq!(r.1, Some(0x01), "a name beyond DNS limits");
    // Silent and half-open clients are dropped after the handshake timeout.
    for opening in [
        &[][..],
        &[5u8, 1, 0][..],
        &[5u8, 1, 0, 5, 1, 0, 3, 200, b'x'][..],
    ] {
        let mut s = TcpStream::connect(proxy).await.unwrap();
        s.write_all(opening).await.unwrap();
        let started = tokio::time::Instant::now();
        let mut buf = [0u8; 64];
        let closed = tokio::time::timeout(Duration::from_secs(10), async {
            loop {
                match s.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {} // the method selection reply
                }
            }
        })
        .await;
        assert!(
            closed.is_ok(),
            "a client stuck after {opening:?} was never dropped"
        );
        assert!(started.elapsed() >= Duration::from_millis(400));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fast_open_replies_at_once_relays_data_and_resets_on_a_failed_connect() {
    let p = pair_with(&[7; 32], &[7; 32], Acl::allow_all(), |f, _| {
        f.fast_open = true
    })
    .await;
    let proxy = p.fwd.local_addr;
    let echo = echo_server().await;
    let closed = TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap()
        .local_addr()
        .unwrap();
    let r = tokio::time::timeout(T, async {
        // A reachable target: success, then the data goes both ways intact, with the
        // request written right after the reply (before the connect result can be known).
        let mut ok = socks(proxy, &v4(echo), echo.port(), 1)
            .await
            .expect("fast open replies success");
        let data = pattern(3, 200_000);
        let (mut rd, mut wr) = ok.split();
        let (_, back) = tokio::join!(wr.write_all(&data), async {
            let mut back = vec![0u8; data.len()];
            rd.read_exact(&mut back).await.map(|_| back)
        });
        // A refused target: the reply still says success, then the connection is reset.
        let mut refused = socks(proxy, &v4(closed), closed.port(), 1)
            .await
            .expect("fast open replies before the connect result");
        let mut buf = [0u8; 16];
        let end = refused.read(&mut buf).await;
        (back.unwrap() == data, end)
    })
    .await
    .expect("no hang");
    assert!(r.0, "echoed bytes differ");
    match r.1 {
        Err(e) => assert_eq!(e.kind(), std::io::ErrorKind::ConnectionReset),
        Ok(n) => panic!("read returned Ok({n}) from a refused target; expected a reset"),
    }
}

/// Time from the SOCKS request to the reply, and the reply code (0 = success).
async fn timed_connect(
    proxy: std::net::SocketAddr,
    target: std::net::SocketAddr,
) -> (Duration, u8) {
    let started = tokio::time::Instant::now();
    let r = tokio::time::timeout(T, socks(proxy, &v4(target), target.port(), 1))
        .await
        .expect("no hang");
    (started.elapsed(), r.err().unwrap_or(0))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn socks_clients_fail_promptly_when_the_key_is_wrong() {
    // Default timeouts: the prompt failure must not depend on shortened ones.
    let p = pair_with(&[7; 32], &[8; 32], Acl::allow_all(), |_, _| {}).await;
    let echo = echo_server().await;
    for _ in 0..2 {
        let (took, code) = timed_connect(p.fwd.local_addr, echo).await;
        assert_eq!(code, 0x01, "general failure");
        assert!(took < Duration::from_secs(5), "took {took:?}");
    }
    let d = p.rev.driver.drops();
    assert!(d.bad_handshake > 0 && d.rejects_sent > 0, "{d:?}");
    assert!(p.rev.driver.stats().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn socks_clients_fail_promptly_when_the_reverse_is_down() {
    // A UDP port that is bound but never answers: the reverse "down" without even an ICMP
    // port-unreachable to go by.
    let silent = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let mut fs = ForwardSettings::new(
        silent.local_addr().unwrap().to_string(),
        Psk::new(&[7; 32]).unwrap(),
    );
    fs.listen = "127.0.0.1:0".parse().unwrap();
    let fwd = start_forward(fs).await.unwrap();
    let echo = echo_server().await;
    for _ in 0..2 {
        let (took, code) = timed_connect(fwd.local_addr, echo).await;
        assert_eq!(code, 0x01, "general failure");
        assert!(took < Duration::from_secs(5), "took {took:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_symbol_size_mismatch_fails_socks_promptly_and_makes_no_session() {
    let p = pair_with(&[7; 32], &[7; 32], Acl::allow_all(), |f, r| {
        f.transport.symbol_size = 1280;
        r.transport.symbol_size = 1408;
    })
    .await;
    let echo = echo_server().await;
    let (took, code) = timed_connect(p.fwd.local_addr, echo).await;
    assert_eq!(code, 0x01);
    assert!(took < Duration::from_secs(5), "took {took:?}");
    assert!(p.rev.driver.stats().is_empty(), "no session on the reverse");
    assert!(p.rev.driver.drops().refused > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_lets_an_open_transfer_finish_and_refuses_new_clients() {
    let p = pair_with(&[7; 32], &[7; 32], Acl::allow_all(), |f, r| {
        f.drain_timeout = Duration::from_secs(20);
        r.drain_timeout = Duration::from_secs(20);
    })
    .await;
    let echo = echo_server().await;
    let data = pattern(11, 24 << 20);
    let s = socks(p.fwd.local_addr, &v4(echo), echo.port(), 1)
        .await
        .expect("connect ok");
    let (mut r, mut w) = s.into_split();
    let payload = data.clone();
    let writer = tokio::spawn(async move {
        w.write_all(&payload).await.unwrap();
        w.shutdown().await.unwrap();
    });
    let mut back = vec![0u8; 1 << 20];
    r.read_exact(&mut back).await.unwrap();
    // Mid-transfer: both ends shut down (as SIGTERM does).
    p.rev.shutdown.send(true).unwrap();
    p.fwd.shutdown.send(true).unwrap();
    let mut rest = Vec::new();
    r.read_to_end(&mut rest).await.unwrap();
    back.extend_from_slice(&rest);
    writer.await.unwrap();
    assert!(
        back == data,
        "byte-exact ({} of {} bytes)",
        back.len(),
        data.len()
    );
    tokio::time::timeout(T, p.fwd.done)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    tokio::time::timeout(T, p.rev.done)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(
        tokio::net::TcpStream::connect(p.fwd.local_addr)
            .await
            .is_err(),
        "the SOCKS port is closed after shutdown"
    );
}
