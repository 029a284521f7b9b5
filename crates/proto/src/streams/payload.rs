//! A source symbol's payload built where it will stay: frames are written straight into
//! the encoder's slot, so a stream's bytes are copied once on their way into the coding
//! window (issue 26's two copies per byte sent).

use crate::frame;

/// Frames written into a fixed slice, front to back.
///
/// Frame headers are small and emitted through a scratch `Vec` first (the frame
/// emitters append to a `Vec`); stream data is copied into the slice directly.
pub(crate) struct PayloadWriter<'a> {
    buf: &'a mut [u8],
    len: usize,
    scratch: Vec<u8>,
}

impl<'a> PayloadWriter<'a> {
    /// An empty payload over `buf`, reusing `scratch`'s allocation for headers.
    pub(crate) fn new(buf: &'a mut [u8], scratch: Vec<u8>) -> Self {
        PayloadWriter {
            buf,
            len: 0,
            scratch,
        }
    }

    /// Bytes written so far.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Appends what `emit` appends to an empty `Vec`. The caller has checked that it
    /// fits (the payload's cap is at most the slice's length).
    pub(crate) fn emit(&mut self, emit: impl FnOnce(&mut Vec<u8>)) {
        let mut scratch = std::mem::take(&mut self.scratch);
        scratch.clear();
        emit(&mut scratch);
        self.reserve(scratch.len()).copy_from_slice(&scratch);
        self.scratch = scratch;
    }

    /// The next `n` bytes of the slice, now part of the payload, for the caller to fill.
    /// Panics past the slice's end: callers bound what they write by the payload's cap,
    /// which is at most the slice's length.
    pub(crate) fn reserve(&mut self, n: usize) -> &mut [u8] {
        let start = self.len;
        self.len += n;
        &mut self.buf[start..self.len]
    }

    /// [`frame::drop_final_stream_length`] on what was written.
    pub(crate) fn drop_final_stream_length(&mut self, start: usize) -> bool {
        let dropped = frame::drop_final_stream_length(&mut self.buf[..self.len], start);
        if dropped {
            self.len -= 2;
        }
        dropped
    }

    /// The payload's length, and the scratch back for the next symbol.
    pub(crate) fn finish(self) -> (usize, Vec<u8>) {
        (self.len, self.scratch)
    }
}
