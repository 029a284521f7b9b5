//! A decoder driven by an arbitrary sequence of source, repair and retire operations.
#![no_main]
use ctcp_rlnc::{CodecConfig, Coefficients, Decoder, RepairHeader};
use libfuzzer_sys::fuzz_target;

const CFG: CodecConfig = CodecConfig { symbol_size: 64, window: 128 };

fuzz_target!(|data: &[u8]| {
    let mut dec = Decoder::new(CFG);
    let mut it = data.chunks(8);
    while let Some(op) = it.next() {
        if op.len() < 8 {
            break;
        }
        let id = u64::from(u16::from_le_bytes([op[1], op[2]]));
        let count = u16::from_le_bytes([op[3], op[4]]);
        let mut body: Vec<u8> = it.next().unwrap_or(&[]).iter().cycle().take(CFG.symbol_size).copied().collect();
        body.resize(CFG.symbol_size, 0);
        match op[0] % 4 {
            0 => {
                let _ = dec.receive_source(id, &body[..(op[5] as usize % CFG.symbol_size)]);
            }
            1 => {
                let h = RepairHeader { first: id, count, coefficients: Coefficients::Key(u16::from_le_bytes([op[6], op[7]])) };
                let _ = dec.receive_repair(&h, &body);
            }
            2 => {
                let h = RepairHeader { first: id, count: count % 200, coefficients: Coefficients::Explicit(body.iter().take(count as usize % 200).copied().collect()) };
                let _ = dec.receive_repair(&h, &body);
            }
            _ => dec.retire_below(id),
        }
        while dec.poll_decoded().is_some() {}
        assert!(dec.status().rank as usize <= CFG.window);
    }
});
