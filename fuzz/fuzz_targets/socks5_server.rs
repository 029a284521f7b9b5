//! The SOCKS5 server handshake on arbitrary input split at an arbitrary point.
#![no_main]
use ctcp_socks5::{AuthPolicy, ServerHandshake, TargetAddr};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let (policy_byte, rest) = data.split_first().unwrap_or((&0, &[]));
    let policy = if policy_byte & 1 == 1 { AuthPolicy::UserPass(vec![("u".into(), "p".into())]) } else { AuthPolicy::NoAuth };
    let split = (*policy_byte as usize).min(rest.len());
    let mut hs = ServerHandshake::new(policy);
    let mut consumed = 0;
    for end in [split, rest.len()] {
        if end < consumed {
            continue;
        }
        match hs.feed(&rest[consumed..end]) {
            Ok(step) => {
                assert!(consumed + step.consumed <= end);
                consumed += step.consumed;
            }
            Err(e) => {
                let _ = ServerHandshake::failure_bytes(&e);
                break;
            }
        }
    }
    let _ = TargetAddr::decode(rest);
});
