//! Every wire parser on arbitrary bytes: packet headers, handshake, chunks, frames.
#![no_main]
use ctcp_proto::fuzzing::Frames;
use ctcp_proto::wire::{peek_conn_id, Accept, Chunks, DataHeader, Initiate, Reject, Reset};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // A reference point for the truncated packet number and symbol ids, from the input's
    // tail (so every value, the extremes included, is reachable).
    let reference = data
        .len()
        .checked_sub(8)
        .and_then(|at| data.get(at..))
        .and_then(|b| <[u8; 8]>::try_from(b).ok())
        .map_or(0, u64::from_le_bytes);
    let _ = peek_conn_id(data);
    let _ = Initiate::parse(data);
    let _ = Accept::parse(data);
    let _ = Reset::parse(data);
    if let Ok(r) = Reject::parse(data) {
        // Emitting what parsed gives back the same bytes (the layout is canonical).
        let mut out = Vec::new();
        r.emit(&mut out);
        assert_eq!(out, data);
    }
    let _ = DataHeader::parse(data, None);
    let _ = DataHeader::parse(data, Some(reference));
    // The deployed symbol size, so every valid SOURCE_LAST length (up to S − 2) is reached.
    let symbol_size = ctcp_proto::TransportConfig::default().symbol_size;
    for c in Chunks::new(data, symbol_size, reference) {
        if c.is_err() {
            break;
        }
    }
    for f in Frames::new(data) {
        if f.is_err() {
            break;
        }
    }
});
