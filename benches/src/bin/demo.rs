//! Runs a ctcp forward + reverse pair on loopback with embedded defaults and a fresh key,
//! pushes real data through the SOCKS port to a local server, checks its SHA-256 and
//! prints the rate. `cargo run --release -p ctcp-benches --bin demo [-- MEGABYTES]`

use anyhow::{bail, Context};
use ctcp_benches::{checksum_sink, fill_block, socks_connect};
use ctcp_proto::Psk;
use ctcp_runtime::{start_forward, start_reverse, ForwardSettings, ReverseSettings};
use rand::RngCore;
use sha2::{Digest, Sha256};
use std::time::Duration;
use tokio::io::AsyncWriteExt;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mb: u64 = std::env::args()
        .nth(1)
        .map_or(Ok(100), |s| s.parse())
        .context("MEGABYTES must be a number")?;
    let mut key = [0u8; 32];
    rand::rngs::OsRng.fill_bytes(&mut key);
    let psk = Psk::new(&key).context("key")?;

    let mut rs = ReverseSettings::new(psk.clone());
    rs.listen = "127.0.0.1:0".parse()?;
    // The sink is on loopback, which the default ACL denies.
    rs.acl = ctcp_runtime::Acl::allow_all();
    let reverse = start_reverse(rs).await?;
    let mut fs = ForwardSettings::new(reverse.local_addr.to_string(), psk);
    fs.listen = "127.0.0.1:0".parse()?;
    let forward = start_forward(fs).await?;
    println!(
        "ctcp-reverse on udp {}, ctcp-forward SOCKS on tcp {}",
        reverse.local_addr, forward.local_addr
    );

    let (sink, mut results) = checksum_sink().await?;
    let started = ctcp_runtime::clock::now();
    let mut conn = tokio::time::timeout(
        Duration::from_secs(15),
        socks_connect(forward.local_addr, sink),
    )
    .await
    .context("SOCKS connect timed out")??;
    let total = mb * 1_000_000;
    let mut sent = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut done = 0u64;
    let mut i = 0;
    while done < total {
        let n = ((total - done) as usize).min(buf.len());
        fill_block(i, &mut buf[..n]);
        sent.update(&buf[..n]);
        conn.write_all(&buf[..n]).await?;
        done += n as u64;
        i += 1;
    }
    conn.shutdown().await?;
    let (got, digest) = tokio::time::timeout(Duration::from_secs(120), results.recv())
        .await
        .context("sink did not finish")?
        .context("sink gone")?;
    let secs = started.elapsed().as_secs_f64();
    let sent: [u8; 32] = sent.finalize().into();
    if got != total || digest != sent {
        bail!(
            "data mismatch: sent {total} bytes, received {got}; checksums {}",
            if digest == sent { "match" } else { "differ" }
        );
    }
    println!(
        "moved {mb} MB through the tunnel in {secs:.2} s: {:.1} MB/s ({:.2} Gbit/s), SHA-256 verified",
        total as f64 / secs / 1e6,
        total as f64 * 8.0 / secs / 1e9
    );
    let _ = forward.shutdown.send(true);
    let _ = reverse.shutdown.send(true);
    Ok(())
}
