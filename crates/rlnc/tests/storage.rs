//! What a session's receiver holds: its decoder's window is twice the sender's `w`, and
//! after each packet it retires what the sender can no longer reference
//! (`ctcp_proto`'s receive path). On a clean path the span held must fit `w` slots.

use ctcp_rlnc::{CodecConfig, Decoder};

const W: u64 = 256;
const SYMBOL: usize = 256;

/// Peak storage over an in-order transfer of `8 w` symbols, retiring below
/// `highest + keep_from` − `w` after each one.
fn peak_storage(keep_from: u64) -> usize {
    let mut d = Decoder::new(CodecConfig {
        symbol_size: SYMBOL,
        window: 2 * W as usize,
    });
    let mut peak = 0;
    for id in 0..8 * W {
        let got = d.receive_source(id, &[id as u8; 100]);
        assert!(got.is_ok(), "symbol {id}: {got:?}");
        while d.poll_decoded().is_some() {}
        d.retire_below((id + keep_from).saturating_sub(W));
        peak = peak.max(d.storage_bytes());
    }
    peak
}

#[test]
fn retiring_to_window_minus_one_keeps_the_storage_at_one_window() {
    // W slots of one symbol each (a multiple of 64), alignment slack, a flag per slot.
    let one_window = W as usize * SYMBOL + 64 + W as usize;
    // The receive path's rule: window − 1 ids kept below the next new one.
    let kept = peak_storage(2);
    assert!(
        kept <= one_window,
        "{kept} bytes held, one window is about {one_window}"
    );
    // Keeping a whole window: the next new id is one past the slots, which then double.
    let whole = peak_storage(1);
    assert!(
        whole > 3 * kept / 2,
        "keeping a whole window held {whole} bytes against {kept}"
    );
}
