//! Systematic sliding-window random linear network coding over GF(2^8).
//!
//! Every source symbol goes out once, uncoded; repair symbols are dense random combinations
//! of a window `[first, first + count)` of source symbols, their coefficients drawn from
//! TinyMT32 seeded with a 16-bit key carried in the header (RFC 8681), or listed explicitly
//! by a relay that recodes. The [`Decoder`] eliminates on the fly over the missing ids only
//! and releases each source symbol the moment it becomes known; a clean path (only source
//! symbols) performs no field arithmetic at all.
//!
//! Sans-IO: no time, no I/O. Memory is bounded by the configured window.
#![deny(unsafe_code)]

mod arena;
mod decoder;
mod encoder;
mod recoder;
pub mod tinymt;

pub use decoder::{Decoder, DecoderStatus, Received};
pub use encoder::Encoder;
pub use recoder::Recoder;

use thiserror::Error;

/// Identifies a source symbol. Ids start at 0 and never wrap (64 bits).
pub type SymbolId = u64;

/// Symbol size and window of an encoder or decoder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CodecConfig {
    /// Bytes of a coded symbol: `[u16 LE length][payload][zero padding]`. A multiple of
    /// 64 so the GF(256) kernels never see a tail.
    pub symbol_size: usize,
    /// Most symbols held at once.
    pub window: usize,
}

impl Default for CodecConfig {
    fn default() -> Self {
        CodecConfig {
            symbol_size: 1344,
            window: 4096,
        }
    }
}

impl CodecConfig {
    /// Largest payload a source symbol can carry.
    pub fn max_payload(&self) -> usize {
        self.symbol_size.saturating_sub(2)
    }
}

/// How a repair symbol's coefficients are given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Coefficients {
    /// Drawn from TinyMT32 seeded with this key (RFC 8681 dense coefficients).
    Key(u16),
    /// Listed explicitly, one per symbol of the range (recoded symbols).
    Explicit(Vec<u8>),
}

/// Header of a repair symbol: which source symbols it combines, and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepairHeader {
    /// First source symbol combined.
    pub first: SymbolId,
    /// Number of consecutive source symbols combined.
    pub count: u16,
    /// The coefficients.
    pub coefficients: Coefficients,
}

impl RepairHeader {
    /// The coefficient vector, one per symbol of `[first, first + count)`.
    pub fn coefficient_vector(&self) -> Result<Vec<u8>, DecodeError> {
        match &self.coefficients {
            Coefficients::Key(k) => {
                let mut v = vec![0u8; self.count as usize];
                tinymt::coefficients(*k, &mut v);
                Ok(v)
            }
            Coefficients::Explicit(v) if v.len() == self.count as usize => Ok(v.clone()),
            Coefficients::Explicit(_) => Err(DecodeError::Malformed("coefficient vector length")),
        }
    }

    /// One past the last symbol combined.
    pub fn end(&self) -> SymbolId {
        self.first.saturating_add(u64::from(self.count))
    }
}

/// Encoder refusals.
#[derive(Debug, Error, Clone, Copy, PartialEq, Eq)]
pub enum EncodeError {
    /// The window is full until symbols are retired (back-pressure).
    #[error("encoder window full ({0} symbols)")]
    WindowFull(usize),
    /// The payload does not fit a symbol.
    #[error("payload of {len} bytes exceeds the symbol capacity of {max}")]
    PayloadTooLarge {
        /// Payload length.
        len: usize,
        /// Capacity.
        max: usize,
    },
    /// The repair range is empty or not inside the window.
    #[error("repair range outside the window")]
    BadRange,
    /// The output buffer is not one symbol long.
    #[error("repair buffer must be exactly one symbol")]
    BadBuffer,
}

/// Decoder refusals. Duplicates and stale symbols are not errors (see [`Received`]).
#[derive(Debug, Error, Clone, Copy, PartialEq, Eq)]
pub enum DecodeError {
    /// The symbol lies beyond the window; accepting it would grow memory without bound.
    #[error("symbol beyond the decoder window")]
    OutOfWindow,
    /// Inconsistent header or data length.
    #[error("malformed symbol: {0}")]
    Malformed(&'static str),
}
