//! A byte queue whose free space can be written in place without zeroing it first: a
//! stream's send buffer, which the application's socket is read straight into.

/// FIFO of bytes in a ring that grows (doubling) and never shrinks while in use.
///
/// Unlike `VecDeque<u8>`, the free space is initialised memory the caller may overwrite
/// ([`ByteRing::room_mut`]), so a socket read into it needs neither `unsafe` nor a
/// `memset` of the bytes about to be read.
#[derive(Debug, Default)]
pub(crate) struct ByteRing {
    /// The ring; its length is the capacity.
    buf: Vec<u8>,
    /// Where the oldest byte is.
    head: usize,
    /// Bytes queued.
    len: usize,
}

impl ByteRing {
    /// Bytes queued.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing is queued.
    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The queued bytes, oldest first, in at most two pieces.
    pub(crate) fn as_slices(&self) -> (&[u8], &[u8]) {
        let cap = self.buf.len();
        if self.head + self.len <= cap {
            (&self.buf[self.head..self.head + self.len], &[])
        } else {
            let (wrapped, tail) = self.buf.split_at(self.head);
            (tail, &wrapped[..self.head + self.len - cap])
        }
    }

    /// Appends `data`.
    pub(crate) fn extend_from_slice(&mut self, data: &[u8]) {
        let (a, b) = self.room_mut(data.len());
        let split = a.len();
        a.copy_from_slice(&data[..split]);
        b.copy_from_slice(&data[split..]);
        self.len += data.len();
    }

    /// The next `n` bytes of free space behind the queued ones, in at most two pieces
    /// (growing the ring if it has less). Their contents are unspecified; what the
    /// caller wrote counts as queued once it calls [`ByteRing::commit`].
    pub(crate) fn room_mut(&mut self, n: usize) -> (&mut [u8], &mut [u8]) {
        if self.buf.len() - self.len < n {
            self.grow(self.len + n);
        }
        let cap = self.buf.len();
        let tail = (self.head + self.len) % cap.max(1);
        if tail + n <= cap {
            (&mut self.buf[tail..tail + n], &mut [])
        } else {
            let (wrapped, end) = self.buf.split_at_mut(tail);
            (end, &mut wrapped[..n - (cap - tail)])
        }
    }

    /// Queues the first `n` bytes of the space [`ByteRing::room_mut`] gave (`n` at most
    /// what it gave).
    pub(crate) fn commit(&mut self, n: usize) {
        debug_assert!(self.len + n <= self.buf.len());
        self.len = (self.len + n).min(self.buf.len());
    }

    /// Drops the `n` oldest bytes (at most all of them).
    pub(crate) fn consume(&mut self, n: usize) {
        let n = n.min(self.len);
        self.len -= n;
        self.head = if self.len == 0 {
            0
        } else {
            (self.head + n) % self.buf.len()
        };
    }

    /// Drops every byte and frees the ring.
    pub(crate) fn clear_and_free(&mut self) {
        *self = ByteRing::default();
    }

    /// A ring of at least `need` bytes (the next power of two, at least double), the
    /// queued bytes moved to its front.
    fn grow(&mut self, need: usize) {
        let cap = need.next_power_of_two().max(2 * self.buf.len()).max(64);
        let mut buf = vec![0u8; cap];
        let (a, b) = self.as_slices();
        buf[..a.len()].copy_from_slice(a);
        buf[a.len()..a.len() + b.len()].copy_from_slice(b);
        self.buf = buf;
        self.head = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;

    /// Random writes (copied in or written in place, some only partly committed) and
    /// consumes against a `VecDeque<u8>` model, across wraps and growth.
    #[test]
    fn behaves_like_a_deque_across_wraps_and_growth() {
        let mut ring = ByteRing::default();
        let mut model = VecDeque::new();
        let mut x = 0x2545_f491u32;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x
        };
        let mut byte = 0u8;
        for _ in 0..5000 {
            let n = (next() % 300) as usize;
            match next() % 3 {
                0 => {
                    let data: Vec<u8> = (0..n).map(|i| byte.wrapping_add(i as u8)).collect();
                    byte = byte.wrapping_add(n as u8);
                    ring.extend_from_slice(&data);
                    model.extend(&data);
                }
                1 => {
                    let (a, b) = ring.room_mut(n);
                    assert_eq!(a.len() + b.len(), n);
                    let keep = (next() as usize) % (n + 1);
                    for (i, v) in a.iter_mut().chain(b.iter_mut()).enumerate() {
                        *v = byte.wrapping_add(i as u8);
                    }
                    for i in 0..keep {
                        model.push_back(byte.wrapping_add(i as u8));
                    }
                    byte = byte.wrapping_add(keep as u8);
                    ring.commit(keep);
                }
                _ => {
                    ring.consume(n);
                    model.drain(..n.min(model.len()));
                }
            }
            assert_eq!(ring.len(), model.len());
            let (a, b) = ring.as_slices();
            let (ma, mb) = model.as_slices();
            assert_eq!([a, b].concat(), [ma, mb].concat());
        }
        ring.clear_and_free();
        assert!(ring.is_empty());
        assert_eq!(ring.room_mut(10).0.len(), 10);
    }
}
