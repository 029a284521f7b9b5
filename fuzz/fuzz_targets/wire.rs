//! Every wire parser on arbitrary bytes: packet headers, handshake, chunks, frames.
#![no_main]
use ctcp_proto::frame::Frames;
use ctcp_proto::wire::{peek_conn_id, Accept, Chunks, DataHeader, Initiate, Reset};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = peek_conn_id(data);
    let _ = Initiate::parse(data);
    let _ = Accept::parse(data);
    let _ = Reset::parse(data);
    let _ = DataHeader::parse(data);
    for c in Chunks::new(data, 1344) {
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
