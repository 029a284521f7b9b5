//! Figures the operator documents state that the code decides: checked against the code
//! so a protocol change cannot leave them stale.

use ctcp_proto::wire::RESET_LEN;

fn security_md() -> String {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../SECURITY.md");
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Every RESET size SECURITY.md gives for today's protocol is the one the wire sends.
#[test]
fn security_md_states_the_reset_size_the_protocol_sends() {
    let doc = security_md();
    assert!(
        doc.contains(&format!("RESET ({RESET_LEN} B)")),
        "the amplification row"
    );
    // The hostile-input rows were run under protocol version 1 (25-byte resets): they
    // must say so, and give today's size.
    let today = format!("resets ({RESET_LEN} bytes");
    assert!(
        doc.matches(&today).count() >= 2,
        "{today:?} in both flood rows"
    );
    for (i, line) in doc.lines().enumerate() {
        for w in line.split_whitespace() {
            if let Some(n) = w.strip_suffix("-byte") {
                let next = line.split(w).nth(1).unwrap_or("");
                let about_resets = next.trim_start().starts_with("reset")
                    || next.trim_start().starts_with("stateless reset");
                assert!(
                    !about_resets || n == RESET_LEN.to_string(),
                    "SECURITY.md:{}: {n}-byte resets, but RESET is {RESET_LEN} bytes",
                    i + 1
                );
            }
        }
    }
}
