//! A server endpoint fed arbitrary datagrams: must never panic, never create a session
//! from unauthenticated input, and never answer with more bytes than it received.
#![no_main]
use ctcp_proto::{Endpoint, EndpointConfig, Psk, TransportConfig};
use libfuzzer_sys::fuzz_target;
use std::time::{Duration, Instant};

fuzz_target!(|data: &[u8]| {
    let psk = Psk::new(&[7u8; 32]).expect("32-byte key");
    let mut ep = Endpoint::new(EndpointConfig::new(psk, TransportConfig::default(), true), [1; 32]);
    #[allow(clippy::disallowed_methods)] // the fuzz harness supplies the clock
    let now = Instant::now();
    let from = "192.0.2.1:4000".parse().expect("literal address");
    let mut received = 0usize;
    for (i, chunk) in data.split(|&b| b == 0xA5).enumerate() {
        let mut d = chunk.to_vec();
        received = received.max(d.len());
        ep.handle_datagram(now + Duration::from_millis(i as u64), from, &mut d);
    }
    assert_eq!(ep.connection_count(), 0, "session created from unauthenticated input");
    let mut out = Vec::new();
    while let Some(t) = ep.poll_transmit(now, &mut out) {
        assert!(t.size <= received, "reply larger than any request");
    }
});
