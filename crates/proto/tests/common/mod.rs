//! Two endpoints in one process, pumped by hand on a fixed clock.
#![allow(dead_code, unreachable_pub, clippy::disallowed_methods)] // a fixed base Instant

use ctcp_proto::{ConnectionHandle, Endpoint, EndpointConfig, Psk, Target, TransportConfig};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// A client and a server endpoint and the client's connection handle.
pub struct Duo {
    pub cli: Endpoint,
    pub srv: Endpoint,
    pub h: ConnectionHandle,
    pub now: Instant,
    pub ca: SocketAddr,
    pub sa: SocketAddr,
}

impl Duo {
    /// Endpoints with `config`, the client connecting; not yet pumped.
    pub fn new(config: TransportConfig) -> Duo {
        let psk = Psk::new(&[9; 32]).unwrap();
        let srv = Endpoint::new(
            EndpointConfig::new(psk.clone(), config.clone(), true),
            [1; 32],
        );
        let mut cli = Endpoint::new(EndpointConfig::new(psk, config, false), [2; 32]);
        let (ca, sa): (SocketAddr, SocketAddr) =
            (([10, 1, 0, 1], 5000).into(), ([10, 1, 0, 2], 7000).into());
        let now = Instant::now();
        let h = cli.connect(now, sa);
        Duo {
            cli,
            srv,
            h,
            now,
            ca,
            sa,
        }
    }

    /// Advances the clock by `dt` and exchanges every pending datagram both ways
    /// (lossless, zero delay); returns the client datagrams it carried.
    pub fn step(&mut self, dt: Duration) -> Vec<Vec<u8>> {
        self.now += dt;
        let mut out = Vec::new();
        let mut carried = Vec::new();
        while let Some(t) = self.cli.poll_transmit(self.now, &mut out) {
            let bytes = out[..t.size].to_vec();
            let mut d = bytes.clone();
            self.srv.handle_datagram(self.now, self.ca, &mut d);
            carried.push(bytes);
        }
        while let Some(t) = self.srv.poll_transmit(self.now, &mut out) {
            let mut d = out[..t.size].to_vec();
            self.cli.handle_datagram(self.now, self.sa, &mut d);
        }
        self.cli.handle_timeout(self.now);
        self.srv.handle_timeout(self.now);
        carried
    }

    /// Opens a client stream to a test target (the session must be established).
    pub fn open_stream(&mut self) -> u64 {
        self.cli
            .connection_mut(self.h)
            .expect("the client's connection exists")
            .open_stream(Target::Domain("t.test".into(), 1))
            .expect("a stream opens on an established session")
    }

    /// Writes `data` on client stream `stream` and finishes it, pumping 1 ms steps (at most
    /// `steps`) until the server's first connection has read it all; `before_step` runs
    /// ahead of each step with the bytes received so far. Returns the bytes received and
    /// the client datagrams carried.
    pub fn transfer(
        &mut self,
        stream: u64,
        data: &[u8],
        steps: usize,
        mut before_step: impl FnMut(&mut Duo, &[u8]),
    ) -> (Vec<u8>, Vec<Vec<u8>>) {
        let (mut written, mut got, mut carried) = (0usize, Vec::new(), Vec::new());
        let mut buf = vec![0u8; 16 << 10];
        for _ in 0..steps {
            before_step(self, &got);
            let c = self
                .cli
                .connection_mut(self.h)
                .expect("the client's connection exists");
            if written < data.len() {
                written += c.write(stream, &data[written..]).unwrap_or(0);
                if written == data.len() {
                    c.finish(stream).expect("the stream is open");
                }
            }
            carried.extend(self.step(Duration::from_millis(1)));
            let h = self.srv.handles()[0];
            let s = self
                .srv
                .connection_mut(h)
                .expect("the server's connection exists");
            while let Ok(ctcp_proto::ReadOutcome::Data(n)) = s.read(self.now, stream, &mut buf) {
                got.extend_from_slice(&buf[..n]);
            }
            if got.len() == data.len() {
                break;
            }
        }
        (got, carried)
    }

    /// Pumps until the client's connection is established (or panics after 10 s);
    /// returns the client datagrams of the handshake.
    pub fn establish(&mut self) -> Vec<Vec<u8>> {
        let mut carried = Vec::new();
        for _ in 0..10_000 {
            if self
                .cli
                .connection(self.h)
                .is_some_and(|c| c.is_established())
            {
                return carried;
            }
            carried.extend(self.step(Duration::from_millis(1)));
        }
        panic!("the handshake did not complete");
    }
}
