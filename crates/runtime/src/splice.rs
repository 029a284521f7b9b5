//! The copy between a TCP socket and a tunnel stream (`copy_bidirectional`), with its
//! buffer size chosen under a process-wide budget.
//!
//! Each fill of a copy buffer is one TCP syscall, one lock of the session's shard and at
//! most one wake-up of its driver, so at tokio's default 8 KiB these, not the bytes, are
//! most of a fast stream's CPU. A 64 KiB buffer moves eight times as much per syscall and
//! per wake-up, but it costs memory for every stream (1,000 streams of 64 KiB add about
//! 56 MB to a proxy's RSS, past issue 26's 128 MB). So the first [`LARGE_STREAMS`] streams
//! of the process at a time get [`LARGE`] buffers and the rest [`SMALL`] ones: a stream
//! that carries a bulk transfer usually has the process to itself, and 1,000 streams cost
//! at most [`LARGE_STREAMS`] × 2 × ([`LARGE`] − [`SMALL`]) more than with small buffers.

use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use tokio::io::{AsyncRead, AsyncWrite};

/// Bytes per direction of a stream holding a large-buffer grant.
pub(crate) const LARGE: usize = 64 * 1024;
/// Bytes per direction otherwise (tokio's default).
pub(crate) const SMALL: usize = 8 * 1024;
/// Streams of the process that may hold large buffers at once.
pub(crate) const LARGE_STREAMS: usize = 32;

/// Large-buffer grants held now, process-wide.
static LARGE_HELD: AtomicUsize = AtomicUsize::new(0);

/// One stream's buffer size: large while it holds one of the [`LARGE_STREAMS`] grants,
/// which it gives back when dropped.
#[derive(Debug)]
pub(crate) struct BufferGrant {
    large: bool,
}

impl BufferGrant {
    /// Takes a large-buffer grant if one is free, else a small one.
    pub(crate) fn take() -> Self {
        let large = LARGE_HELD
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < LARGE_STREAMS).then_some(n + 1)
            })
            .is_ok();
        BufferGrant { large }
    }

    /// Bytes per direction this grant allows.
    pub(crate) fn size(&self) -> usize {
        if self.large {
            LARGE
        } else {
            SMALL
        }
    }
}

impl Drop for BufferGrant {
    fn drop(&mut self) {
        if self.large {
            LARGE_HELD.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// Copies both ways between `a` and `b` until both directions end (as
/// `tokio::io::copy_bidirectional`), with buffers sized by a [`BufferGrant`] held for the
/// copy's life. Returns the bytes moved a → b and b → a.
///
/// # Errors
/// The first I/O error of either direction.
pub(crate) async fn splice<A, B>(a: &mut A, b: &mut B) -> io::Result<(u64, u64)>
where
    A: AsyncRead + AsyncWrite + Unpin + ?Sized,
    B: AsyncRead + AsyncWrite + Unpin + ?Sized,
{
    let grant = BufferGrant::take();
    tokio::io::copy_bidirectional_with_sizes(a, b, grant.size(), grant.size()).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn large_grants_are_bounded_and_given_back() {
        // Other tests of this process may hold grants too: count only what this one took.
        let grants: Vec<_> = (0..LARGE_STREAMS + 8)
            .map(|_| BufferGrant::take())
            .collect();
        let large = grants.iter().filter(|g| g.size() == LARGE).count();
        assert!(large <= LARGE_STREAMS);
        assert!(grants
            .iter()
            .all(|g| g.size() == LARGE || g.size() == SMALL));
        assert!(LARGE_HELD.load(Ordering::Acquire) <= LARGE_STREAMS);
        let before = LARGE_HELD.load(Ordering::Acquire);
        drop(grants);
        assert_eq!(LARGE_HELD.load(Ordering::Acquire), before - large);
    }

    #[tokio::test]
    async fn splice_moves_both_ways_and_half_closes() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (mut a, a_far) = tokio::io::duplex(1024);
        let (mut b, b_far) = tokio::io::duplex(1024);
        let copy = tokio::spawn(async move { splice(&mut a, &mut b).await });
        let up: Vec<u8> = (0..200_000u32).map(|i| i as u8).collect();
        let down: Vec<u8> = (0..70_000u32).map(|i| (i * 7) as u8).collect();
        // Each far end writes and reads at once, as a socket's peer would.
        async fn exchange(end: tokio::io::DuplexStream, out: Vec<u8>) -> Vec<u8> {
            let (mut r, mut w) = tokio::io::split(end);
            let send = async move {
                w.write_all(&out).await.unwrap();
                w.shutdown().await.unwrap();
            };
            let recv = async move {
                let mut got = Vec::new();
                r.read_to_end(&mut got).await.unwrap();
                got
            };
            tokio::join!(send, recv).1
        }
        let writer_a = tokio::spawn(exchange(a_far, up.clone()));
        let writer_b = tokio::spawn(exchange(b_far, down.clone()));
        assert_eq!(writer_b.await.unwrap(), up);
        assert_eq!(writer_a.await.unwrap(), down);
        let (ab, ba) = copy.await.unwrap().unwrap();
        assert_eq!((ab, ba), (up.len() as u64, down.len() as u64));
    }
}
